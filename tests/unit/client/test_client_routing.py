"""Client routing against a fake cluster: direct to the owner, stale map fallback."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from streamiq.client import AsyncClient, Client, QueryError
from streamiq.kafka.partitioner import partition_for

A, B, C = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"


def fake(owners: dict[int, str], dead: set[str], log: list[str]) -> Any:
    """A cluster whose /v1/cluster says ``owners``; nodes in ``dead`` refuse connections."""

    def handler(req: httpx.Request) -> httpx.Response:
        node = f"{req.url.host}:{req.url.port}"
        log.append(f"{node} {req.url.path}")
        if node in dead:
            raise httpx.ConnectError("refused")
        if req.url.path == "/v1/views":
            return httpx.Response(200, json={"views": [{"name": "balances", "partitions": 3}]})
        if req.url.path == "/v1/cluster":
            return httpx.Response(200, json={"self": node, "nodes": [
                {"endpoint": n} for n in (A, B, C) if n not in dead], "views": {"balances": {
                    str(p): {"assigned": [o], "replicas": [{"address": o}]}
                    for p, o in owners.items()}}})
        key = req.url.path.rsplit("/", 1)[-1]
        if key == "missing":
            return httpx.Response(404, json={"code": "NOT_FOUND", "detail": "no row"})
        if key == "bad":
            return httpx.Response(400, json={"code": "BAD_REQUEST", "detail": "bad key"})
        hops = "0" if owners[partition_for(key, 3)] == node else "1"
        return httpx.Response(200, json={"key": key, "served_by": node},
                              headers={"x-streamiq-hops": hops})

    return handler


def test_goes_straight_to_the_owner() -> None:
    owners = {0: A, 1: B, 2: C}
    log: list[str] = []
    with Client([A], transport=httpx.MockTransport(fake(owners, set(), log))) as c:
        for i in range(30):
            key = f"acc-{i}"
            assert c.get("balances", key) == {"key": key, "served_by": owners[
                partition_for(key, 3)]}
            assert c.last is not None and c.last.hops == 0
        assert c.get("balances", "missing") is None
        with pytest.raises(QueryError, match="BAD_REQUEST"):
            c.get("balances", "bad")
    assert sum("/v1/cluster" in x for x in log) == 1  # metadata fetched once


def test_stale_map_refreshes_and_retries_elsewhere() -> None:
    owners = {0: A, 1: B, 2: C}
    dead: set[str] = set()
    log: list[str] = []
    c = Client(f"{A},{B}", transport=httpx.MockTransport(fake(owners, dead, log)))
    key = next(f"k{i}" for i in range(100) if partition_for(f"k{i}", 3) == 2)
    assert (c.get("balances", key) or {}).get("served_by") == C
    dead.add(C)           # C dies; its partition moves to A
    owners[2] = A
    assert (c.get("balances", key) or {}).get("served_by") == A
    assert c.last is not None and c.last.hops == 0 and c.last.node == A
    c.close()


async def test_async_client_same_routing() -> None:
    owners = {0: B, 1: C, 2: A}
    log: list[str] = []
    async with AsyncClient(C, transport=httpx.MockTransport(fake(owners, set(), log))) as c:
        for i in range(10):
            doc = await c.get("balances", f"x{i}")
            assert doc is not None and doc["served_by"] == owners[partition_for(f"x{i}", 3)]
            assert c.last is not None and c.last.hops == 0
