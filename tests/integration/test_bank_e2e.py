"""Seed 000 end to end through real processes: broker, ingest, pipeline, 3 nodes.

The seed's failure: only the instance owning an account's partition could answer
(500 elsewhere). Here every node answers every account, with the same balance.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from typing import Any

import httpx
import pytest
from procs import HTTP

pytestmark = pytest.mark.integration

ACCOUNTS = [str(100000 + i) for i in range(100)]


def _post_transactions(ingest: int, n: int, seed: int) -> tuple[dict[str, int], Counter[int]]:
    rng = random.Random(seed)
    expected: dict[str, int] = defaultdict(int)
    partitions: Counter[int] = Counter()
    with httpx.Client(base_url=f"http://127.0.0.1:{ingest}", timeout=10) as c:
        for _ in range(n):
            account, amount = rng.choice(ACCOUNTS), rng.randint(-50, 100)
            r = c.post(f"/account/{account}", params={"amount": amount})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["offset"] >= 0 and body["position"].endswith(f":{body['offset']}")
            expected[account] += amount
            partitions[body["partition"]] += 1
    return dict(expected), partitions


def _balances(port: int, accounts: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
        for a in accounts:
            r = c.get(f"/account/{a}")
            assert r.status_code in (200, 404), (port, a, r.status_code, r.text)
            out[a] = r.json()["value"]["balance"] if r.status_code == 200 else None
    return out


def test_every_node_answers_every_account(cluster: Any) -> None:
    pipe = cluster.pipeline("bank", wait=False)  # ready while the others start
    ingest, _ = cluster.ingest("bank")
    nodes = cluster.nodes(3, "bank")
    cluster.pipeline_ready(pipe)
    expected, partitions = _post_transactions(ingest, 300, seed=7)
    assert set(partitions) == {0, 1, 2}, partitions  # records land on all three partitions

    accounts = sorted(expected)
    deadline = time.monotonic() + 90
    seen: dict[int, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        seen = {port: _balances(port, accounts) for port, _ in nodes}
        if all(s == expected for s in seen.values()):
            break
        time.sleep(1)
    for port, s in seen.items():
        wrong = {a: (s[a], expected[a]) for a in accounts if s[a] != expected[a]}
        assert not wrong, f"node {port}: {len(wrong)} wrong, e.g. {list(wrong.items())[:5]}"

    # Lookups were answered both locally and by forwarding, and never more than one hop.
    hops: Counter[str] = Counter()
    for port, _ in nodes:
        for a in accounts[:30]:
            r = HTTP.get(f"http://127.0.0.1:{port}/account/{a}")
            hops[r.headers["x-streamiq-hops"]] += 1
            assert r.json()["value"]["count"] > 0
    assert set(hops) == {"0", "1"}, hops


def test_unknown_and_malformed_requests(cluster: Any) -> None:
    ingest, _ = cluster.ingest("bank")
    (port, _), = cluster.nodes(1, "bank")
    base = f"http://127.0.0.1:{port}"
    r = HTTP.get(f"{base}/account/999999999")
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
    r = HTTP.get(f"{base}/account/a%7Cb")
    assert r.status_code == 400 and "account" in r.json()["detail"]
    r = HTTP.get(f"{base}/v1/views/nope/keys/1")
    assert r.status_code == 404 and r.json()["code"] == "UNKNOWN_VIEW"
    ing = f"http://127.0.0.1:{ingest}"
    for params, word in (({"amount": "ten"}, "amount"), ({}, "amount"),
                         ({"amount": str(10**13)}, "amount")):
        r = HTTP.post(f"{ing}/account/100001", params=params)
        assert r.status_code == 400, r.text
        assert word in r.json()["detail"]
    r = HTTP.post(f"{ing}/account/bad%20id", params={"amount": 1})
    assert r.status_code == 400 and "account" in r.json()["detail"]
