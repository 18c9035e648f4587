"""A node records each query's latency by type and how it was served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from nodeapp import call, make_app, peer_lookup

from streamiq.config import Settings
from streamiq.serving.http.metrics import query_of, served_of


@pytest.mark.parametrize(("method", "path", "query"), [
    ("GET", "/account/100001", "lookup"),
    ("GET", "/v1/views/balances/keys/a1", "lookup"),
    ("POST", "/v1/views/balances/keys", "multiget"),
    ("GET", "/v1/views/balances/scan", "scan"),
    ("GET", "/v1/views/balances/aggregate", "aggregate"),
    ("GET", "/v1/views/order_counts_1m/keys/s1/windows", "windows"),
    ("GET", "/v1/views", None), ("GET", "/health", None), ("GET", "/metrics", None),
    ("GET", "/v1/cluster", None), ("GET", "/v1/views/balances/keys", None)])
def test_query_types(method: str, path: str, query: str | None) -> None:
    assert query_of(method, path) == query


def test_how_served() -> None:
    hops = b"x-streamiq-hops"
    assert served_of("lookup", [(hops, b"0")]) == "local"
    assert served_of("lookup", [(hops, b"1")]) == "forwarded"
    assert served_of("scan", [(hops, b"0")]) == "fanout"


async def test_each_lookup_is_counted_once_where_the_client_asked(app: Any) -> None:
    latency = app.deps.coordinator.traffic.latency
    for _ in range(7):
        status, _, _ = await call(app, "/v1/views/balances/keys/a1")
        assert status == 200
    assert peer_lookup(app, "a1")[0] == 200  # a peer's, over the peer protocol: its
    assert latency.count(("lookup", "local")) == 7  # entry counts it as forwarded
    assert latency.count(("lookup", "peer")) == 0


async def test_the_full_app_records_scatter_gather_and_errors(app: Any) -> None:
    latency = app.deps.coordinator.traffic.latency
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://n") as c:
        assert (await c.get("/v1/views/balances/scan")).status_code == 200
        r = await c.post("/v1/views/balances/keys", json={"keys": ["a1", "zz"]})
        assert r.status_code == 200
        assert (await c.get("/v1/views/balances/keys/a1?max_lag=5")).status_code == 200
        assert (await c.get("/v1/views/nope/keys/x")).status_code == 404
        assert (await c.get("/v1/views")).status_code == 200  # not a query: not timed
    assert latency.count(("scan", "fanout")) == 1
    assert latency.count(("multiget", "fanout")) == 1
    assert latency.count(("lookup", "local")) == 2  # with a query string: the full route
    assert sum(latency.count(k) for k in latency.counts) == 4


async def test_lookups_through_the_node_protocol_are_counted(
        app: Any, serve_node: Any) -> None:
    port = await serve_node(app)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
        for _ in range(5):
            assert (await c.get("/v1/views/balances/keys/a1")).status_code == 200
    assert app.deps.coordinator.traffic.latency.count(("lookup", "local")) == 5


def test_metrics_off_records_nothing(tmp_path: Path) -> None:
    app = make_app(tmp_path / "n", Settings(auth=False, metrics=False))
    assert app.deps.coordinator.traffic.latency is None
    assert "/metrics" not in {getattr(r, "path", "") for r in app.app.routes}
