"""The client's consistency parameters: ``consistent`` and ``max_staleness_ms`` go out
as the HTTP API's parameters, and ``scan_all(consistent=True)`` asks for a cut once and
then follows the cursors (which carry it)."""

from __future__ import annotations

from typing import Any

import httpx

from streamiq.client import Client

NODE = "10.0.0.1:1"


def node(asked: list[httpx.URL]) -> Any:
    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/v1/views":
            return httpx.Response(200, json={"views": [{"name": "balances", "partitions": 3}]})
        if req.url.path == "/v1/cluster":
            return httpx.Response(200, json={"nodes": [{"endpoint": NODE}], "views": {}})
        asked.append(req.url)
        if req.url.path.endswith("/scan"):
            first = "cursor" not in req.url.params
            return httpx.Response(200, json={"status": "OK", "rows": [{"key": "a"}],
                                             "next_cursor": "c1" if first else None})
        return httpx.Response(200, json={"status": "OK", "results": [], "groups": []})

    return handler


def test_consistency_parameters_reach_the_api() -> None:
    asked: list[httpx.URL] = []
    with Client(NODE, transport=httpx.MockTransport(node(asked))) as c:
        c.aggregate("balances", ["sum(balance)"], consistent=True)
        c.multi_get("balances", ["a"], consistent=True, max_staleness_ms=0)
        c.top("balances", "balance", 3, max_staleness_ms=50)
        c.get("balances", "a", max_staleness_ms=0)
        c.aggregate("balances")  # neither: neither sent
        rows = list(c.scan_all("balances", consistent=True))
    params = [dict(u.params) for u in asked]
    assert params[0]["consistent"] == "true"
    assert params[1]["consistent"] == "true" and params[1]["max_staleness_ms"] == "0"
    assert params[2]["max_staleness_ms"] == "50" and "consistent" not in params[2]
    assert params[3]["max_staleness_ms"] == "0"
    assert "consistent" not in params[4] and "max_staleness_ms" not in params[4]
    assert rows == [{"key": "a"}, {"key": "a"}]
    assert params[5]["consistent"] == "true"  # the first page chooses the cut
    assert params[6]["cursor"] == "c1" and "consistent" not in params[6]  # its cursor has it


def test_a_cut_sent_back_as_position_reaches_every_query_type() -> None:
    """Monotonic reads: a reader sends its newest ``cut`` (or a write's token) as
    ``position`` on a multi-get, scan, aggregate or top-k, with its ``wait_ms``."""
    asked: list[httpx.URL] = []
    cut = "bank-transactions:0:7,bank-transactions:1:9"
    with Client(NODE, transport=httpx.MockTransport(node(asked))) as c:
        c.aggregate("balances", ["sum(balance)"], consistent=True, position=cut, wait_ms=900)
        c.multi_get("balances", ["a"], position=cut)
        c.scan("balances", consistent=True, position=cut)
        c.top("balances", "balance", 3, position=cut, wait_ms=5)
    params = [dict(u.params) for u in asked]
    assert [p["position"] for p in params] == [cut] * 4
    assert params[0]["wait_ms"] == "900" and params[3]["wait_ms"] == "5"
    assert "wait_ms" not in params[1] and "wait_ms" not in params[2]
