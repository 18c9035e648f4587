"""The full routes render the query layer's one-partition answers as they always have."""

from __future__ import annotations

from typing import Any

from nodeapp import call


async def test_a_partition_no_replica_can_answer_is_503(app: Any) -> None:
    app.deps.node.holds = lambda view, p: False  # nor does any other node
    status, body, headers = await call(app, "/v1/views/order_counts_1m/keys/s1|GENERAL/windows")
    assert status == 503 and body["code"] == "UNAVAILABLE", body
    assert headers["content-type"] == "application/problem+json"


async def test_a_key_windows_answered_here_is_hops_0(app: Any) -> None:
    status, body, headers = await call(app, "/v1/views/order_counts_1m/keys/s1|GENERAL/windows",
                                       query=b"from=5&to=9")
    assert status == 200 and headers["x-streamiq-hops"] == "0"
    assert (body["status"], body["from"], body["to"], body["windows"]) == ("OK", 5, 9, [])
    assert body["served_by"] == headers["x-streamiq-served-by"]


async def test_top_k_over_http(app: Any) -> None:
    """GET /v1/views/{view}/top: the route renders the query layer's merged top k."""
    import httpx

    transport = httpx.ASGITransport(app=app.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as c:
        r = await c.get("/v1/views/balances/top", params={"column": "balance", "k": 3})
        assert r.status_code == 200, r.text
        doc = r.json()
        assert doc["status"] == "OK" and doc["column"] == "balance" and doc["order"] == "desc"
        assert [row["key"] for row in doc["rows"]] == ["a1"] and doc["count"] == 1
        assert r.headers["x-streamiq-hops"] == "0"
        bads: list[dict[str, str | int]] = [{"column": "balance", "k": 0}, {"column": "nope"},
                                            {"column": "balance", "order": "up"}, {}]
        for bad in bads:
            r = await c.get("/v1/views/balances/top", params=bad)
            assert r.status_code == 400 and r.json()["code"] == "BAD_REQUEST", (bad, r.text)
