"""The client's changes() against a fake cluster: while every node refuses (421, 429,
5xx) or is down it tries again after a growing, jittered, bounded wait; a refusal that
trying again cannot cure (400, 401, 403, 404) is raised at once (issue 40)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from streamiq.client import AsyncClient, Client, QueryError

A, B = "10.0.0.1:1", "10.0.0.2:1"
STREAM = b"id: 0-5\ndata: {\"key\": \"k\", \"found\": true, \"value\": {\"balance\": 5}}\n\n"


def fake(failures: list[int | None], log: list[str]) -> Any:
    """A two-node cluster whose /changes answers are ``failures`` in turn (a status, or
    None: connection refused), then one change."""

    def handler(req: httpx.Request) -> httpx.Response:
        node = f"{req.url.host}:{req.url.port}"
        if req.url.path == "/v1/views":
            return httpx.Response(200, json={"views": [{"name": "balances", "partitions": 3}]})
        if req.url.path == "/v1/cluster":
            return httpx.Response(200, json={"self": node, "nodes": [
                {"endpoint": n} for n in (A, B)], "views": {}})
        log.append(node)
        if failures:
            status = failures.pop(0)
            if status is None:
                raise httpx.ConnectError("refused")
            return httpx.Response(status, json={"code": "X", "detail": f"{status}"})
        return httpx.Response(200, content=STREAM,
                              headers={"content-type": "text/event-stream"})

    return handler


def test_every_node_refusing_is_tried_again_after_a_growing_bounded_wait() -> None:
    log: list[str] = []
    failures: list[int | None] = [503, None, 429, 421, 504, 500, None, 429, 503, 503, 503]
    n = len(failures)
    slept: list[float] = []
    with Client([A, B], transport=httpx.MockTransport(fake(failures, log))) as c:
        c._sleep = slept.append  # type: ignore[method-assign, assignment]
        change = next(iter(c.changes("balances", key="k")))
    assert change["value"] == {"balance": 5} and change["position"] == "0-5"
    assert len(log) == n + 1 and set(log) == {A, B}
    assert len(slept) == n  # one wait after each failure
    assert slept[0] == 0  # the first try again at once (another node)
    highs = [0.0] + [min(0.1 * 2 ** i, 5.0) for i in range(n - 1)]
    for s, high in zip(slept, highs, strict=True):
        assert high / 2 <= s <= high, (slept, highs)  # jittered within [half, whole]
    assert max(slept) <= 5.0 and slept[-1] >= 2.5


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_a_refusal_trying_again_cannot_cure_is_raised_at_once(status: int) -> None:
    log: list[str] = []
    slept: list[float] = []

    async def asleep(s: float) -> None:
        slept.append(s)

    async with AsyncClient([A, B], transport=httpx.MockTransport(
            fake([status], log))) as c:
        c._asleep = asleep  # type: ignore[method-assign, assignment]
        with pytest.raises(QueryError) as e:
            async for _ in c.changes("balances", key="k"):
                pass
    assert e.value.http_status == status and len(log) == 1
    assert slept == []


def test_the_wait_is_reset_by_a_stream_that_delivered() -> None:
    from streamiq.client._core import Backoff

    b = Backoff()
    waits = [b.next() for _ in range(12)]
    assert waits[0] == 0 and all(w <= Backoff.MOST for w in waits) and waits[-1] >= 2.5
    b.reset()
    assert b.next() == 0
