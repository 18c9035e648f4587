"""Position tokens on every query type: multi-get, scan, aggregate and window fetches.

A write's token (from ingest, or any producer's delivery report: topic, partition,
offset) makes a query wait until every partition it reads reflects that write, so the
query answers with the write in it even when asked at once, on any node.
"""

from __future__ import annotations

import random
from typing import Any

import httpx
import pytest
from procs import HTTP, SHORT_BATCHES

pytestmark = pytest.mark.integration


def _get(c: httpx.Client, port: int, path: str, **params: Any) -> httpx.Response:
    return c.get(f"http://127.0.0.1:{port}{path}", params=params)


def _known(ports: list[int]) -> dict[int, Any]:
    """What each node's partitions are known to reflect, and its ticks (a failure's
    evidence: /health's ``positions`` and ``ticks``)."""
    out: dict[int, Any] = {}
    for port in ports:
        try:
            doc = HTTP.get(f"http://127.0.0.1:{port}/health", timeout=10).json()
            out[port] = {"positions": doc.get("positions"), "ticks": doc.get("ticks")}
        except Exception as exc:  # the evidence, not the test: never mask the failure
            out[port] = repr(exc)
    return out


def test_every_query_type_waits_for_the_position(cluster: Any) -> None:
    pipe = cluster.pipeline("bank,orders", extra=SHORT_BATCHES, wait=False)
    # ready while the others start; batches end every 10 s (a windowed view's waits)
    ingest, _ = cluster.ingest("bank,orders")
    ports = [p for p, _ in cluster.nodes(3, "bank,orders")]
    rng = random.Random(5)
    balances: dict[str, int] = {}
    general: dict[str, int] = {}  # store -> GENERAL orders
    with httpx.Client(timeout=150) as c:
        w = c.post(f"http://127.0.0.1:{ingest}/account/pq-warm", params={"amount": 1}).json()
        balances["pq-warm"] = 1
        # and an order (a store outside the "pq" prefixes below), before the pipeline's
        # queries start: each view's first micro-batch (the slow one: it warms the JVM
        # and Python workers, and runs before the pipeline says ready) reads them, the
        # three at once; wait for them once, long
        o = c.post(f"http://127.0.0.1:{ingest}/orders",
                   json={"order_id": "warm", "store": "warm", "type": "GENERAL",
                         "amount": 5}).json()
        cluster.pipeline_ready(pipe)
        r = _get(c, ports[0], "/account/pq-warm", position=w["position"], wait_ms=120_000)
        assert r.status_code == 200, r.text
        r = _get(c, ports[0], "/v1/views/order_counts/keys/warm|GENERAL",
                 position=o["position"], wait_ms=120_000)
        assert r.status_code == 200 and r.json()["value"]["count"] == 1, r.text
        r = _get(c, ports[0], "/v1/views/order_counts_1m/keys/warm|GENERAL/windows",
                 position=o["position"], wait_ms=120_000)
        assert r.status_code == 200, r.text
        assert [x["count"] for x in r.json()["windows"]] == [1], r.text
        for i in range(6):
            port = ports[i % 3]
            account, amount = f"pq-{rng.randrange(4)}", rng.randint(1, 100)
            w = c.post(f"http://127.0.0.1:{ingest}/account/{account}",
                       params={"amount": amount}).json()
            balances[account] = balances.get(account, 0) + amount
            bank = {"position": w["position"], "wait_ms": 60_000}
            store = f"pq{rng.randrange(3)}"
            o = c.post(f"http://127.0.0.1:{ingest}/orders",
                       json={"order_id": f"pq{i}", "store": store, "type": "GENERAL",
                             "amount": 5}).json()
            general[store] = general.get(store, 0) + 1
            orders = {"position": o["position"], "wait_ms": 60_000}

            r = c.post(f"http://127.0.0.1:{port}/v1/views/balances/keys",
                       params=bank, json={"keys": [account]})
            assert r.status_code == 200, (r.text, _known(ports))
            assert r.json()["results"][0]["value"]["balance"] == balances[account], (i, r.text)

            r = _get(c, port, "/v1/views/balances/scan", prefix="pq-", **bank)
            assert r.status_code == 200, (r.text, _known(ports))
            assert {x["key"]: x["value"]["balance"] for x in r.json()["rows"]} == balances

            r = _get(c, port, "/v1/views/order_counts/aggregate", prefix="pq",
                     group_by="type", agg="sum(count)", **orders)
            assert r.status_code == 200, (r.text, _known(ports))
            assert r.json()["groups"] == [{"type": "GENERAL",
                                           "sum(count)": sum(general.values())}], (i, r.text)

            r = _get(c, port, f"/v1/views/order_counts_1m/keys/{store}|GENERAL/windows",
                     **orders)
            assert r.status_code == 200, (r.text, _known(ports))
            assert sum(x["count"] for x in r.json()["windows"]) == general[store], (i, r.text)

            r = _get(c, port, "/v1/views/order_counts_1m/windows", prefix="pq", **orders)
            assert r.status_code == 200, (r.text, _known(ports))
            per_key: dict[str, int] = {}
            for x in r.json()["rows"]:
                per_key[x["key"]] = per_key.get(x["key"], 0) + x["value"]["count"]
            assert per_key == {f"{s}|GENERAL": n for s, n in general.items()}, (i, r.text)


def test_a_position_never_reached_is_not_up_to_bound_on_every_query_type(cluster: Any
                                                                         ) -> None:
    ingest, _ = cluster.ingest("bank,orders")
    (port, _), = cluster.nodes(1, "bank,orders")
    w = HTTP.post(f"http://127.0.0.1:{ingest}/orders",
                  json={"order_id": "x", "store": "s", "type": "GENERAL",
                         "amount": 1}).json()
    bound = {"position": w["position"], "wait_ms": 300}  # no pipeline: never reflected
    base = f"http://127.0.0.1:{port}/v1/views"
    answers = [
        HTTP.post(f"{base}/order_counts/keys", params=bound, json={"keys": ["s|GENERAL"]}),
        HTTP.get(f"{base}/order_counts/scan", params=bound),
        HTTP.get(f"{base}/order_counts/aggregate", params=bound),
        HTTP.get(f"{base}/order_counts_1m/keys/s|GENERAL/windows", params=bound),
        HTTP.get(f"{base}/order_counts_1m/windows", params=bound),
    ]
    for r in answers:
        assert r.status_code == 503, (r.request.url, r.text)
        assert r.json()["code"] == "NOT_UP_TO_BOUND", (r.request.url, r.text)
    bad = HTTP.get(f"{base}/order_counts/aggregate", params={"position": "nonsense"})
    assert bad.status_code == 400 and "position" in bad.json()["detail"], bad.text
