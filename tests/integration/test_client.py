"""streamiq.Client / AsyncClient against 3 real nodes: direct to owners, survives a dead node."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from streamiq.client import AsyncClient, Client
from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES
from streamiq.views.base import View
from streamiq.views.orders import ORDER_COUNTS

pytestmark = pytest.mark.integration


def produce(cluster: Any, view: View, rows: list[dict[str, Any]]) -> None:
    topic = cluster.topic(view.changelog_topic)
    ensure_topics({"bootstrap.servers": cluster.bootstrap}, {topic: 3})
    p = Producer({"bootstrap.servers": cluster.bootstrap, "partitioner": "murmur2_random"})
    for row in rows:
        p.produce(topic, key=view.key_of(row).encode(), value=json.dumps(row).encode())
    assert p.flush(15) == 0


async def test_client_goes_direct_and_survives_stale_metadata(cluster: Any) -> None:
    nodes = cluster.nodes(3, app="bank,orders")
    bal = {f"c{i:03d}": {"account": f"c{i:03d}", "balance": i * 7 - 100, "count": i % 5 + 1,
                         "last_update": 1000 + i} for i in range(60)}
    oc: list[dict[str, Any]] = [
        {"store": f"s{s}", "type": t, "count": s + len(t), "revenue": 1.5 * s}
        for s in range(10) for t in ("GENERAL", "RESTAURANT")]
    produce(cluster, BALANCES, list(bal.values()))
    produce(cluster, ORDER_COUNTS, oc)
    seeds = ",".join(f"127.0.0.1:{p}" for p, _ in nodes)
    c = Client(seeds, headers={"authorization": "Bearer test"})
    deadline = time.monotonic() + 60
    while True:  # loaded and every partition held by its active plus one standby
        meta = c.cluster()
        agg = c.aggregate("balances")
        if agg["status"] == "OK" and agg["groups"] and agg["groups"][0]["count(*)"] == 60 \
                and all(len(pv["replicas"]) == 2 for parts in meta["views"].values()
                        for pv in parts.values()):
            break
        assert time.monotonic() < deadline, (meta, agg)
        time.sleep(0.3)
    # and every node's map shows each partition's assigned owner active: a client that
    # read the map mid-handover sends a key to the old owner, by then its standby
    cluster.settle([p for p, _ in nodes], "balances")
    c.refresh()

    for key, row in bal.items():
        doc = c.get("balances", key)
        assert doc is not None and doc["value"] == row
        assert c.last is not None and c.last.hops == 0 and doc["role"] == "active"
    assert c.get("balances", "nobody") is None
    d = c.multi_get("balances", list(bal))
    assert {r["key"]: r["value"] for r in d["results"]} == bal
    assert [r["key"] for r in c.scan_all("balances", page=7)] == sorted(bal)
    top = c.top("balances", "balance", 5)  # top-k: each owner's top 5, merged
    assert [r["value"] for r in top["rows"]] == sorted(
        bal.values(), key=lambda r: (-int(str(r["balance"])), str(r["account"])))[:5]
    d = c.aggregate("order_counts", ["sum(count)", "avg(revenue)"], group_by="type")
    assert [(g["type"], g["sum(count)"]) for g in d["groups"]] == [
        (t, sum(r["count"] for r in oc if r["type"] == t)) for t in ("GENERAL", "RESTAURANT")]

    async with AsyncClient(seeds) as ac:
        for key in list(bal)[:20]:
            doc = await ac.get("balances", key)
            assert doc is not None and doc["value"] == bal[key] and ac.last is not None
            assert ac.last.hops == 0
        assert [r async for r in ac.scan_all("balances", page=11)] == [
            r for r in c.scan_all("balances", page=500)]

    # stale metadata: a node dies after the client cached the map (standbys take over)
    dead_port, dead = nodes[1]
    dead.kill()
    for key, row in bal.items():
        doc = c.get("balances", key)
        assert doc is not None and doc["value"] == row, key
        assert c.last is not None and c.last.node != f"127.0.0.1:{dead_port}"
        assert c.last.hops <= 1
    c.close()
