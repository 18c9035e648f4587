"""Read-your-writes through the real pipeline: ingest token -> query on a non-owner."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from procs import HTTP

pytestmark = pytest.mark.integration


def _non_owner(nodes: list[tuple[int, Any]], account: str) -> int:
    """A node holding no replica of the account's partition: its read is forwarded (a
    standby whose row already reflects the position may answer itself, with no hop)."""
    port = nodes[0][0]
    meta = HTTP.get(f"http://127.0.0.1:{port}/v1/metadata/balances/{account}").json()
    holders = {meta["active"], *meta["standbys"]}
    return next(p for p, _ in nodes if f"127.0.0.1:{p}" not in holders)


def test_query_with_position_sees_the_write(cluster: Any) -> None:
    pipe = cluster.pipeline("bank", wait=False)  # ready while the others start
    ingest, _ = cluster.ingest("bank")
    nodes = cluster.nodes(3, "bank")
    rng = random.Random(3)
    totals: dict[str, int] = {"ryw-warm": 1}
    with httpx.Client(timeout=150) as c:
        # The pipeline's first micro-batch warms up the JVM and Python workers (10-20 s
        # on 2 busy cores): written before the query starts, this write is in that batch
        # (not in the next); wait for it once, with the longest wait the API allows.
        w = c.post(f"http://127.0.0.1:{ingest}/account/ryw-warm", params={"amount": 1})
        cluster.pipeline_ready(pipe)
        r = c.get(f"http://127.0.0.1:{nodes[0][0]}/account/ryw-warm",
                  params={"position": w.json()["position"], "wait_ms": 120_000})
        assert r.status_code == 200 and r.json()["value"]["balance"] == 1, r.text
        # 30 writes to 6 accounts, each read back at once on a non-owner with its
        # position. One client per account, the six at once: an account's writes and
        # reads stay in order (its balance after each write is known), while the
        # micro-batches carry several clients' writes (8 rounds of a batch, not 30)
        writes: dict[str, list[tuple[int, int]]] = {}
        for i in range(30):
            account = f"ryw{rng.randrange(6)}"
            writes.setdefault(account, []).append((i, rng.randint(1, 100)))

        def client(account: str) -> None:
            for i, amount in writes[account]:
                w = c.post(f"http://127.0.0.1:{ingest}/account/{account}",
                           params={"amount": amount})
                assert w.status_code == 200, w.text
                totals[account] = totals.get(account, 0) + amount
                port = _non_owner(nodes, account)
                r = c.get(f"http://127.0.0.1:{port}/account/{account}",
                          params={"position": w.json()["position"], "wait_ms": 20_000})
                assert r.status_code == 200, (i, r.text)
                assert r.json()["value"]["balance"] == totals[account], (i, account, r.json())
                assert r.headers["x-streamiq-hops"] == "1"

        with ThreadPoolExecutor(len(writes)) as pool:
            for done in [pool.submit(client, a) for a in writes]:
                done.result()  # a client's failed assertion fails the test


def test_unreachable_position_is_not_up_to_bound(cluster: Any) -> None:
    ingest, _ = cluster.ingest("bank")
    (port, _), = cluster.nodes(1, "bank")
    w = HTTP.post(f"http://127.0.0.1:{ingest}/account/ryw", params={"amount": 1}).json()
    future = f"{w['topic']}:{w['partition']}:{w['offset'] + 1_000_000}"
    # No pipeline runs, so the write itself is never reflected either.
    for token in (future, w["position"]):
        r = HTTP.get(f"http://127.0.0.1:{port}/v1/views/balances/keys/ryw",
                     params={"position": token, "wait_ms": 300})
        assert r.status_code == 503 and r.json()["code"] == "NOT_UP_TO_BOUND", r.text
    r = HTTP.get(f"http://127.0.0.1:{port}/account/ryw", params={"position": "nonsense"})
    assert r.status_code == 400 and "position" in r.json()["detail"]
