"""Requests past the size and time limits are refused while read, on the node's real HTTP
server: answered with a JSON problem naming the limit, then the connection closed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from httpserve import closed_by_server, exchange, read_response, serving

from streamiq.errors import PROBLEM_JSON, PayloadTooLarge, RequestTimeout
from streamiq.serving.http.http_limits import (
    MAX_BODY_BYTES,
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    HttpEdge,
    Refusals,
)
from streamiq.views.base import MAX_KEY_BYTES

Serve = Callable[..., Awaitable[int]]


async def test_headers_past_the_limit_are_431(app: Any, serve_node: Serve) -> None:
    port = await serve_node(app)
    big = b"x-junk: " + b"a" * MAX_HEAD_BYTES + b"\r\n"
    status, _, body, closed = await exchange(
        port, b"GET /v1/views/balances/keys/a1 HTTP/1.1\r\nhost: n\r\n" + big + b"\r\n")
    assert status == 431 and json.loads(body)["code"] == "HEADER_TOO_LARGE" and closed


async def test_a_body_past_the_limit_is_413_announced_or_streamed(app: Any,
                                                                   serve_node: Serve) -> None:
    port = await serve_node(app)
    head = b"POST /v1/views/balances/keys HTTP/1.1\r\nhost: n\r\ncontent-type: application/json\r\n"
    announced = head + b"content-length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1)
    status, _, body, closed = await exchange(port, announced)  # refused before any body
    assert status == 413 and json.loads(body)["limit"] == MAX_BODY_BYTES and closed
    chunk = b"a" * (1 << 20)
    chunked = head + b"transfer-encoding: chunked\r\n\r\n" + b"".join(
        b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(MAX_BODY_BYTES // len(chunk) + 1))
    status, _, body, closed = await exchange(port, chunked)
    assert status == 413 and json.loads(body)["code"] == "BODY_TOO_LARGE" and closed


async def test_the_largest_legitimate_multi_get_is_answered(app: Any, serve_node: Serve) -> None:
    port = await serve_node(app)
    keys = [f"{i:04d}" + "k" * (MAX_KEY_BYTES - 4) for i in range(1000)]
    body = json.dumps({"keys": keys}).encode()
    status, _, answer, _ = await exchange(
        port, b"POST /v1/views/balances/keys HTTP/1.1\r\nhost: n\r\ncontent-type: "
              b"application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
    assert status == 200 and len(json.loads(answer)["results"]) == 1000


A1_HEAD = b"GET /v1/views/balances/keys/a1 HTTP/1.1\r\nhost: n\r\n"


def timed(seconds: float = 0.3, refusals: Refusals | None = None) -> HttpEdge:
    """The limits with a short request-read timeout."""
    return HttpEdge(seconds, refusals=refusals or Refusals())


async def test_a_header_that_never_ends_is_431_before_its_end(app: Any,
                                                              serve_node: Serve) -> None:
    port = await serve_node(app)  # httptools keeps a header until its end: not past 64 KiB
    endless = A1_HEAD + b"x-junk: " + b"a" * (16 * MAX_HEAD_BYTES)
    status, _, body, closed = await exchange(port, endless)
    assert status == 431 and json.loads(body)["limit"] == MAX_HEAD_BYTES and closed


async def test_more_header_fields_than_the_limit_is_431(app: Any, serve_node: Serve) -> None:
    port = await serve_node(app)
    fields = [b"x-h%d: 1\r\n" % i for i in range(MAX_HEADERS)]  # with host: one too many
    status, _, body, closed = await exchange(port, A1_HEAD + b"".join(fields) + b"\r\n")
    assert status == 431 and json.loads(body)["limit"] == MAX_HEADERS and closed
    status, _, _, _ = await exchange(port, A1_HEAD + b"".join(fields[1:]) + b"\r\n")
    assert status == 200  # host and 99 more: at the limit


async def test_what_is_not_http_is_a_json_400(app: Any, serve_node: Serve) -> None:
    port = await serve_node(app)
    status, headers, body, closed = await exchange(port, b"\x00\x01 nonsense\r\n\r\n")
    assert status == 400 and headers["content-type"] == PROBLEM_JSON and closed
    assert json.loads(body)["code"] == "BAD_REQUEST"


@pytest.mark.parametrize("partial", [
    b"",  # connects and says nothing
    A1_HEAD,  # a head that never ends
    b"POST /v1/views/balances/keys HTTP/1.1\r\nhost: n\r\ncontent-type: application/json\r\n"
    b"content-length: 100\r\n\r\n{\"keys\": [",  # a body that never ends
], ids=["nothing", "head", "body"])
async def test_a_request_not_received_in_time_is_408_and_closed(
        app: Any, serve_node: Serve, partial: bytes) -> None:
    refusals = Refusals()
    port = await serve_node(app, timed(refusals=refusals))
    status, _, body, closed = await exchange(port, partial)
    assert status == 408 and json.loads(body)["code"] == "REQUEST_TIMEOUT" and closed
    assert refusals.counts == {"request_timeout": 1}


async def test_a_client_sending_one_byte_at_a_time_is_cut_off(app: Any,
                                                              serve_node: Serve) -> None:
    port = await serve_node(app, timed())
    r, w = await asyncio.open_connection("127.0.0.1", port)

    async def trickle() -> None:  # slowloris: each byte well within any idle timeout
        with contextlib.suppress(ConnectionError):
            for byte in A1_HEAD + b"x-slow: " + b"a" * 10_000:
                w.write(bytes([byte]))
                await w.drain()
                await asyncio.sleep(0.02)

    sending = asyncio.create_task(trickle())
    try:
        status, _, body = await asyncio.wait_for(read_response(r), 30)
        assert status == 408 and json.loads(body)["code"] == "REQUEST_TIMEOUT"
        assert await closed_by_server(r)
    finally:
        sending.cancel()
        w.close()


async def test_a_keep_alive_client_is_not_cut_off(app: Any, serve_node: Serve) -> None:
    port = await serve_node(app, timed(0.3))
    r, w = await asyncio.open_connection("127.0.0.1", port)
    for pause in [0.05] * 12 + [0.6]:  # well past the read timeout in all, then idle past it
        w.write(A1_HEAD + b"\r\n")
        status, _, body = await asyncio.wait_for(read_response(r), 30)
        assert status == 200 and json.loads(body)["value"]["balance"] == 5
        await asyncio.sleep(pause)
    w.write(A1_HEAD + b"\r\n")  # the same connection, after idling past the read timeout
    assert (await asyncio.wait_for(read_response(r), 30))[0] == 200
    w.close()


def test_refusals_are_counted_each_and_logged_once_per_reason(
        caplog: pytest.LogCaptureFixture) -> None:
    refusals = Refusals()
    with caplog.at_level(logging.WARNING, "streamiq.http"):
        for _ in range(500):
            refusals.note(RequestTimeout("too slow"), ("10.0.0.9", 5))
        refusals.note(PayloadTooLarge("too big"), ("10.0.0.9", 6))
    assert refusals.counts == {"request_timeout": 500, "body_too_large": 1}
    assert len(caplog.records) == 2 and "10.0.0.9" in caplog.records[0].getMessage()


async def test_a_stream_outlives_the_read_timeout() -> None:
    """Once its request is read whole, a response streamed for longer than the read
    timeout (server-sent events) is not cut by a 408: the read deadline ended with the
    request. (The server upgrades to no WebSocket; a stream is its long-lived answer.)"""
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def ticks() -> Any:
        for i in range(8):  # well past the read timeout in all
            yield f"data: m{i}\n\n".encode()
            await asyncio.sleep(0.1)

    async def events(_: Any) -> StreamingResponse:
        return StreamingResponse(ticks(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/events", events)])
    async with serving(app, HttpEdge(0.2)) as port:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET /events HTTP/1.1\r\nhost: n\r\n\r\n")
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head
        rest = await asyncio.wait_for(r.readuntil(b"0\r\n\r\n"), 30)
        assert [f"m{i}".encode() in rest for i in range(8)] == [True] * 8
        w.close()
