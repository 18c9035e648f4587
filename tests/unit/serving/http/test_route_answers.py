"""The full routes render the query layer's one-partition answers as they always have."""

from __future__ import annotations

from typing import Any

from nodeapp import call


async def test_a_peers_request_for_a_partition_not_held_is_421_hops_0(app: Any) -> None:
    app.deps.node.holds = lambda view, p: False  # placement refuses: NOT_ACTIVE
    status, body, headers = await call(app, "/v1/views/order_counts_1m/keys/s1|GENERAL/windows",
                                       forwarded=True)
    assert status == 421 and body["code"] == "NOT_ACTIVE"
    assert headers["x-streamiq-hops"] == "0"


async def test_a_key_windows_answered_here_is_hops_0(app: Any) -> None:
    status, body, headers = await call(app, "/v1/views/order_counts_1m/keys/s1|GENERAL/windows",
                                       forwarded=False, query=b"from=5&to=9")
    assert status == 200 and headers["x-streamiq-hops"] == "0"
    assert (body["status"], body["from"], body["to"], body["windows"]) == ("OK", 5, 9, [])
    assert body["served_by"] == headers["x-streamiq-served-by"]
