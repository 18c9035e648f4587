"""Every query type from every node of a 3-node cluster equals an independent ground truth.

Rows are produced straight to the changelog topics following the changelog contract
(key = key columns joined by "|", murmur2 partitioner, JSON row), so these tests do not
depend on the pipeline. Ground truth is computed here from what was produced.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from procs import HTTP

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES
from streamiq.views.base import View
from streamiq.views.orders import ORDER_COUNTS, ORDER_COUNTS_1M

pytestmark = pytest.mark.integration

T0 = 1_700_000_040_000  # a minute boundary


def produce(cluster: Any, view: View, rows: list[dict[str, Any]]) -> None:
    topic = cluster.topic(view.changelog_topic)
    ensure_topics({"bootstrap.servers": cluster.bootstrap}, {topic: 3})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "partitioner": "murmur2_random",
                  "linger.ms": 5})
    for row in rows:
        p.produce(topic, key=view.key_of(row).encode(), value=json.dumps(row).encode())
    assert p.flush(15) == 0


def make_data() -> dict[str, list[dict[str, Any]]]:
    rnd = random.Random(7)
    balances = [{"account": f"acc-{i:03d}", "balance": rnd.randint(-500, 5000),
                 "count": rnd.randint(1, 20), "last_update": T0 + i} for i in range(120)]
    counts = [{"store": f"st{s:02d}", "type": t, "count": rnd.randint(1, 50),
               "revenue": round(rnd.uniform(1, 900), 2)}
              for s in range(25) for t in ("GENERAL", "RESTAURANT")]
    windows = [{"store": f"st{s:02d}", "type": t, "window_start": T0 + w * 60_000,
                "window_end": T0 + (w + 1) * 60_000, "count": rnd.randint(1, 9),
                "revenue": float(rnd.randint(1, 99))}
               for s in range(8) for t in ("GENERAL", "RESTAURANT") for w in range(4)
               if rnd.random() < 0.8]
    return {"balances": balances, "order_counts": counts, "order_counts_1m": windows}


def get(port: int, path: str, **params: Any) -> httpx.Response:
    r = HTTP.get(f"http://127.0.0.1:{port}{path}", params=params, timeout=10)
    if r.status_code < 400 and path.startswith("/v1/views/"):
        assert r.headers["x-streamiq-hops"] in ("0", "1"), (path, r.headers)
    return r


def wait_loaded(port: int, totals: dict[str, int], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = {v: get(port, f"/v1/views/{v}/aggregate").json() for v in totals}
        if all(d["status"] == "OK" and d["groups"] and d["groups"][0]["count(*)"] == totals[v]
               for v, d in got.items()):
            return
        assert time.monotonic() < deadline, got
        time.sleep(0.3)


def wait_stable(port: int, timeout: float = 30) -> dict[str, Any]:
    """Until every partition is held by exactly its assigned active (standby 0)."""
    deadline = time.monotonic() + timeout
    while True:
        meta: dict[str, Any] = get(port, "/v1/cluster").json()
        ok = len(meta["nodes"]) == 3 and all(
            [r["address"] for r in pv["replicas"]] == pv["assigned"][:1]
            for parts in meta["views"].values() for pv in parts.values())
        if ok:
            return meta
        assert time.monotonic() < deadline, meta
        time.sleep(0.2)


def window_counts(port: int) -> dict[str, int]:
    """Orders per key, summed over every 1-minute window of order_counts_1m."""
    per_key: dict[str, int] = {}
    for x in scan_all(port, "/v1/views/order_counts_1m/windows", 1000):
        per_key[x["key"]] = per_key.get(x["key"], 0) + x["value"]["count"]
    return per_key


def scan_all(port: int, path: str, limit: int, **params: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    cursor = None
    while True:
        q = {**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        d = get(port, path, **q).json()
        assert d["status"] == "OK", d
        assert len(d["rows"]) <= limit
        rows += d["rows"]
        cursor = d["next_cursor"]
        if cursor is None:
            return rows


def sk(row: dict[str, Any]) -> tuple[str, int]:
    return row["key"], row["value"].get("window_start", 0)


def test_every_query_from_every_node_then_partial(cluster: Any) -> None:
    data = make_data()
    nodes = cluster.nodes(3, app="bank,orders", extra=["--standby-replicas", "0"])
    for view in (BALANCES, ORDER_COUNTS, ORDER_COUNTS_1M):
        produce(cluster, view, data[view.name])
    ports = [p for p, _ in nodes]
    wait_loaded(ports[0], {v: len(rows) for v, rows in data.items()})
    meta = wait_stable(ports[0])

    bal = {BALANCES.key_of(r): r for r in data["balances"]}
    oc = {ORDER_COUNTS.key_of(r): r for r in data["order_counts"]}
    win = sorted(data["order_counts_1m"], key=lambda r: (ORDER_COUNTS_1M.key_of(r),
                                                         r["window_start"]))
    hops_seen: set[str] = set()
    for port in ports:
        views = get(port, "/v1/views").json()["views"]
        assert {v["name"] for v in views} == set(data)
        # key lookups
        for key in list(bal)[:12]:
            r = get(port, f"/v1/views/balances/keys/{key}")
            assert r.status_code == 200 and r.json()["value"] == bal[key]
            hops_seen.add(r.headers["x-streamiq-hops"])
        r = get(port, "/v1/views/order_counts/keys/st03|GENERAL")
        assert r.json()["value"] == oc["st03|GENERAL"]
        # multi-get: every account, one absent, duplicates folded
        keys = [*bal, "acc-999", "acc-000"]
        r = HTTP.post(f"http://127.0.0.1:{port}/v1/views/balances/keys", json={"keys": keys})
        d = r.json()
        assert d["status"] == "OK" and d["missing_partitions"] == [] and d["missing_keys"] == []
        assert [x["key"] for x in d["results"]] == [*bal, "acc-999"]
        assert {x["key"]: x["value"] for x in d["results"] if x["found"]} == bal
        assert r.headers["x-streamiq-hops"] == "1"
        # scans: full (paged), prefix, range
        rows = scan_all(port, "/v1/views/balances/scan", 17)
        assert [x["key"] for x in rows] == sorted(bal)
        assert all(x["value"] == bal[x["key"]] for x in rows)
        rows = scan_all(port, "/v1/views/order_counts/scan", 10, prefix="st1")
        assert [x["key"] for x in rows] == sorted(k for k in oc if k.startswith("st1"))
        rows = scan_all(port, "/v1/views/order_counts/scan", 1000,
                        **{"from": "st05|RESTAURANT", "to": "st09"})
        assert [x["key"] for x in rows] == sorted(k for k in oc if "st05|RESTAURANT" <= k < "st09")
        # aggregates (seed 001/002: GENERAL orders across all stores)
        r = get(port, "/v1/views/order_counts/aggregate", group_by="type", agg="sum(count)")
        assert r.json()["groups"] == [
            {"type": t, "sum(count)": sum(x["count"] for x in oc.values() if x["type"] == t)}
            for t in ("GENERAL", "RESTAURANT")]
        assert r.headers["x-streamiq-hops"] == "1"
        d = get(port, "/v1/views/balances/aggregate",
                agg=["sum(balance)", "avg(balance)", "min(balance)", "max(last_update)",
                     "count(*)"]).json()
        # top-k (issue 39): each owner's top k over the peer protocol, merged here
        top = get(port, "/v1/views/balances/top", column="balance", k=10).json()
        want = sorted(bal.values(), key=lambda x: (-x["balance"], x["account"]))[:10]
        assert top["status"] == "OK" and [x["value"] for x in top["rows"]] == want, top
        low = get(port, "/v1/views/balances/top", column="balance", k=3, order="asc").json()
        assert [x["value"]["balance"] for x in low["rows"]] == sorted(
            x["balance"] for x in bal.values())[:3]
        b = [x["balance"] for x in bal.values()]
        assert d["status"] == "OK" and d["groups"] == [{
            "sum(balance)": sum(b), "avg(balance)": pytest.approx(sum(b) / len(b)),
            "min(balance)": min(b), "max(last_update)": T0 + 119, "count(*)": 120}]
        d = get(port, "/v1/views/order_counts_1m/aggregate",
                group_by="window_start,type", agg="sum(count)").json()
        truth: dict[tuple[int, str], int] = {}
        for x in win:
            truth[(x["window_start"], x["type"])] = truth.get(
                (x["window_start"], x["type"]), 0) + x["count"]
        assert d["groups"] == [{"window_start": w, "type": t, "sum(count)": n}
                               for (w, t), n in sorted(truth.items())]
        # windows: one key over a range, all keys in a range (paged)
        key = ORDER_COUNTS_1M.key_of(win[0])
        lo, hi = T0 + 60_000, T0 + 180_000
        d = get(port, f"/v1/views/order_counts_1m/keys/{key}/windows",
                **{"from": lo, "to": hi}).json()
        assert d["windows"] == [x for x in win if ORDER_COUNTS_1M.key_of(x) == key
                                and lo <= x["window_start"] < hi]
        rows = scan_all(port, "/v1/views/order_counts_1m/windows", 7, **{"from": lo, "to": hi})
        assert [x["value"] for x in rows] == [x for x in win if lo <= x["window_start"] < hi]
        assert rows == sorted(rows, key=sk)
        check_bad_input(port)
    assert hops_seen == {"0", "1"}
    # forwarded queries went node to node over the peer protocol (nodes speak no HTTP
    # to each other), and nothing was slow enough here to be hedged... or counted if so
    peers = [get(p, "/health").json()["peers"] for p in ports]
    assert all(h["replies"] > 0 for h in peers), peers
    assert all(set(h["hedges"]) == {"sent", "won", "suspects"} for h in peers), peers

    # stop one node hard: its partitions have no other replica -> PARTIAL, never a wrong total
    dead_port, dead = nodes[2]
    dead_ep = f"127.0.0.1:{dead_port}"
    lost = {v: sorted(int(p) for p, pv in parts.items() if pv["assigned"][0] == dead_ep)
            for v, parts in meta["views"].items()}
    assert lost["order_counts"] and lost["balances"]
    dead.kill()
    d = get(ports[0], "/v1/views/order_counts/aggregate", group_by="type",
            agg="sum(count)").json()
    assert d["status"] == "PARTIAL" and d["missing_partitions"] == lost["order_counts"], d
    d = get(ports[1], "/v1/views/balances/scan", limit=1000).json()
    assert d["status"] == "PARTIAL" and d["missing_partitions"] == lost["balances"], d
    kept = sorted(k for k in bal if BALANCES.partition_of(k, 3) not in lost["balances"])
    assert [x["key"] for x in d["rows"]] == kept


def check_bad_input(port: int) -> None:
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        ("/v1/views/order_counts/aggregate", {"group_by": "nope"}, 400, "unknown column 'nope'"),
        ("/v1/views/order_counts/aggregate", {"agg": "median(count)"}, 400, "unknown function"),
        ("/v1/views/order_counts/aggregate", {"agg": "sum(nope)"}, 400, "unknown column"),
        ("/v1/views/order_counts/keys/st01", {}, 400, "store|type"),
        ("/v1/views/order_counts/scan", {"limit": 0}, 400, "limit"),
        ("/v1/views/order_counts/scan", {"limit": 100000}, 400, "limit"),
        ("/v1/views/order_counts/scan", {"cursor": "garbage"}, 400, "cursor"),
        ("/v1/views/order_counts/keys/a|b/windows", {}, 400, "not windowed"),
        ("/v1/views/order_counts_1m/windows", {"from": "x"}, 400, "from"),
        ("/v1/views/nope/scan", {}, 404, "nope"),
        ("/v1/views/nope/aggregate", {}, 404, "nope"),
    ]
    for path, params, status, needle in cases:
        r = get(port, path, **params)
        assert r.status_code == status and needle in r.json()["detail"], (path, r.text)
    r = HTTP.post(f"http://127.0.0.1:{port}/v1/views/order_counts/keys",
                  json={"keys": ["st01|GENERAL", "bad"]})
    assert r.status_code == 400 and "keys[1]" in r.json()["detail"]
    r = HTTP.post(f"http://127.0.0.1:{port}/v1/views/order_counts/keys", json={"keys": []})
    assert r.status_code == 400 and "keys" in r.json()["detail"]


def test_redirect_mode_answers_307_to_the_owner(cluster: Any) -> None:
    nodes = cluster.nodes(2, app="bank", extra=["--redirect"])
    produce(cluster, BALANCES, [{"account": f"a{i}", "balance": i, "count": 1,
                                 "last_update": T0} for i in range(20)])
    port = nodes[0][0]
    deadline = time.monotonic() + 30
    while True:
        meta = get(port, "/v1/cluster").json()
        if len(meta["nodes"]) == 2 and all(  # settled: active first, standby restored
                len(pv["replicas"]) == 2 and pv["replicas"][0]["role"] == "active"
                for pv in meta["views"]["balances"].values()):
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    me = f"127.0.0.1:{port}"
    owners = {p: pv["replicas"][0]["address"] for p, pv in meta["views"]["balances"].items()}
    other = next(f"a{i}" for i in range(20)
                 if owners[str(BALANCES.partition_of(f"a{i}", 3))] != me)
    r = HTTP.get(f"http://127.0.0.1:{port}/v1/views/balances/keys/{other}",
                 headers={"authorization": "Bearer t"})
    assert r.status_code == 307
    owner = owners[str(BALANCES.partition_of(other, 3))]
    assert r.headers["location"] == f"http://{owner}/v1/views/balances/keys/{other}"


def test_end_to_end_through_ingest_and_pipeline(cluster: Any) -> None:
    """POST /orders and /account/{id} -> Spark pipeline -> changelog -> nodes -> queries."""
    pipe = cluster.pipeline("bank,orders", wait=False)  # ready while the others start
    ingest, _ = cluster.ingest("bank,orders")
    nodes = cluster.nodes(3, app="bank,orders")
    rnd = random.Random(11)
    counts: dict[str, int] = {}
    revenue: dict[str, float] = {}
    balances: dict[str, int] = {}
    with httpx.Client(base_url=f"http://127.0.0.1:{ingest}", timeout=30) as c:
        for i in range(40):
            store, typ = f"e{rnd.randrange(5)}", rnd.choice(["GENERAL", "RESTAURANT"])
            amount = rnd.randint(1, 50)
            r = c.post("/orders", json={"order_id": f"o{i}", "store": store, "type": typ,
                                        "amount": amount})
            assert r.status_code == 200, r.text
            counts[f"{store}|{typ}"] = counts.get(f"{store}|{typ}", 0) + 1
            revenue[f"{store}|{typ}"] = revenue.get(f"{store}|{typ}", 0) + amount
        for _ in range(20):
            account, amount = f"e-acc{rnd.randrange(6)}", rnd.randint(-20, 100)
            assert c.post(f"/account/{account}", params={"amount": amount}).status_code == 200
            balances[account] = balances.get(account, 0) + amount
    # written before the pipeline's queries start: their first micro-batch (the slow,
    # cold one, which runs before the pipeline says ready) reads them, not nothing
    cluster.pipeline_ready(pipe)
    ports = [p for p, _ in nodes]
    by_type = [{"type": t, "sum(count)": sum(n for k, n in counts.items() if k.endswith(t))}
               for t in ("GENERAL", "RESTAURANT") if any(k.endswith(t) for k in counts)]
    deadline = time.monotonic() + 180
    while True:
        d = get(ports[0], "/v1/views/order_counts/aggregate", group_by="type",
                agg="sum(count)").json()
        b = get(ports[0], "/v1/views/balances/aggregate", agg="sum(balance)").json()
        if d["groups"] == by_type and b["groups"] == [{"sum(balance)": sum(balances.values())}]:
            break
        assert time.monotonic() < deadline, (d["groups"], by_type, b["groups"], balances)
        time.sleep(0.5)
    for port in ports:
        r = get(port, "/v1/views/order_counts/aggregate", group_by="type", agg="sum(count)")
        assert r.json()["status"] == "OK" and r.json()["groups"] == by_type
        for key, n in counts.items():
            v = get(port, f"/v1/views/order_counts/keys/{key}").json()["value"]
            assert v["count"] == n and v["revenue"] == pytest.approx(revenue[key])
        d = HTTP.post(f"http://127.0.0.1:{port}/v1/views/balances/keys",
                      json={"keys": list(balances)}).json()
        assert {x["key"]: x["value"]["balance"] for x in d["results"]} == balances
        # order_counts_1m is a query of its own: it may be a micro-batch behind the others
        while (per_key := window_counts(port)) != counts and time.monotonic() < deadline:
            time.sleep(0.5)
        assert per_key == counts
