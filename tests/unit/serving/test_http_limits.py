"""Requests past the size limits are refused while parsed, on a real uvicorn server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from test_protocol import read_response

from streamiq.serving.http_limits import MAX_BODY_BYTES, MAX_HEAD_BYTES
from streamiq.views.base import MAX_KEY_BYTES

Serve = Callable[..., Awaitable[int]]


async def _exchange(port: int, request: bytes) -> tuple[int, dict[str, str], bytes, bool]:
    """Send, read one answer; whether the server then closed the connection."""
    r, w = await asyncio.open_connection("127.0.0.1", port)

    async def send() -> None:
        try:
            w.write(request)
            await w.drain()
        except ConnectionError:
            pass  # it may close while a large request is still being written

    sending = asyncio.create_task(send())
    status, headers, body = await read_response(r)
    try:  # the server's FIN, or its reset once the lingering close ends
        closed = await asyncio.wait_for(r.read(), 15) == b""
    except ConnectionError:
        closed = True
    sending.cancel()
    w.close()
    return status, headers, body, closed


async def test_headers_past_the_limit_are_431(app: Any, serve_node: Serve) -> None:
    port = await serve_node(app)
    big = b"x-junk: " + b"a" * MAX_HEAD_BYTES + b"\r\n"
    status, _, body, closed = await _exchange(
        port, b"GET /v1/views/balances/keys/a1 HTTP/1.1\r\nhost: n\r\n" + big + b"\r\n")
    assert status == 431 and json.loads(body)["code"] == "HEADER_TOO_LARGE" and closed


async def test_a_body_past_the_limit_is_413_announced_or_streamed(app: Any,
                                                                   serve_node: Serve) -> None:
    port = await serve_node(app)
    head = b"POST /v1/views/balances/keys HTTP/1.1\r\nhost: n\r\ncontent-type: application/json\r\n"
    announced = head + b"content-length: %d\r\n\r\n" % (MAX_BODY_BYTES + 1)
    status, _, body, closed = await _exchange(port, announced)  # refused before any body
    assert status == 413 and json.loads(body)["limit"] == MAX_BODY_BYTES and closed
    chunk = b"a" * (1 << 20)
    chunked = head + b"transfer-encoding: chunked\r\n\r\n" + b"".join(
        b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(MAX_BODY_BYTES // len(chunk) + 1))
    status, _, body, closed = await _exchange(port, chunked)
    assert status == 413 and json.loads(body)["code"] == "BODY_TOO_LARGE" and closed


async def test_the_largest_legitimate_multi_get_is_answered(app: Any, serve_node: Serve) -> None:
    port = await serve_node(app)
    keys = [f"{i:04d}" + "k" * (MAX_KEY_BYTES - 4) for i in range(1000)]
    body = json.dumps({"keys": keys}).encode()
    status, _, answer, _ = await _exchange(
        port, b"POST /v1/views/balances/keys HTTP/1.1\r\nhost: n\r\ncontent-type: "
              b"application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
    assert status == 200 and len(json.loads(answer)["results"]) == 1000
