"""The HTTP server's lean writes (``leanserve.py``'s ``LeanPosts``) over real sockets: a
route answers once the body is read whole (now or from a later callback), pipelined
writes are answered in order, and what the route declines, a body past
``LEAN_BODY_BYTES`` or an ``Expect: 100-continue`` reach the app with the whole body."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio
from httpserve import read_response, serving

from streamiq.serving.http.asgi import Cycle
from streamiq.serving.http.leanserve import LEAN_BODY_BYTES, Answer, PostRoute


class Echo:
    """Takes ``POST /echo`` (a body of ``no`` declined), answers with the body read, after
    ``delay`` seconds from a loop callback, as a delivery report would."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.taken: list[bytes] = []

    def route(self, cycle: Cycle) -> PostRoute | None:
        return self.echo if cycle.path == "/echo" else None

    def echo(self, cycle: Cycle, then: Callable[[Answer | None], None]) -> None:
        body = bytes(cycle.body)
        if body == b"no":
            then(None)
            return
        self.taken.append(body)
        answer = (200, b"lean:" + body, [(b"content-length", b"%d" % (len(body) + 5))])
        asyncio.get_running_loop().call_later(self.delay, then, answer)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The full app: answers ``app:`` and the body it received."""
    body, more = b"", True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    out = b"app:" + body
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", b"%d" % len(out))]})
    await send({"type": "http.response.body", "body": out})


@pytest_asyncio.fixture(loop_scope="function")
async def echo() -> AsyncIterator[tuple[int, Echo]]:
    writes = Echo(0.01)
    async with serving(app, writes=writes) as port:
        yield port, writes


def post(path: str, body: bytes, *extra: str) -> bytes:
    return "\r\n".join([f"POST {path} HTTP/1.1", "host: x", f"content-length: {len(body)}",
                        *extra, "", ""]).encode() + body


async def test_pipelined_writes_are_answered_in_order(echo: tuple[int, Echo]) -> None:
    port, writes = echo
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(post("/echo", b"1") + post("/echo", b"no") + post("/other", b"3")
            + post("/echo", b"4"))
    got = [(await read_response(r))[2] for _ in range(4)]
    assert got == [b"lean:1", b"app:no", b"app:3", b"lean:4"]
    assert writes.taken == [b"1", b"4"]
    w.close()


async def test_a_body_sent_in_parts_is_answered_once_whole(echo: tuple[int, Echo]) -> None:
    port, _ = echo
    r, w = await asyncio.open_connection("127.0.0.1", port)
    whole = post("/echo", b"abcdef")
    w.write(whole[:-4])
    await w.drain()
    await asyncio.sleep(0.05)
    w.write(whole[-4:])
    assert (await read_response(r))[2] == b"lean:abcdef"
    w.close()


async def test_large_bodies_and_expect_continue_go_to_the_app(echo: tuple[int, Echo]) -> None:
    port, writes = echo
    r, w = await asyncio.open_connection("127.0.0.1", port)
    big = b"x" * (LEAN_BODY_BYTES + 1)
    w.write(post("/echo", big))
    assert (await read_response(r))[2] == b"app:" + big
    w.write(post("/echo", b"", "expect: 100-continue").replace(b"content-length: 0",
                                                                 b"content-length: 2"))
    assert (await r.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100")
    w.write(b"ok")
    assert (await read_response(r))[2] == b"app:ok"
    assert writes.taken == []
    w.close()


async def test_a_client_gone_before_the_answer_leaves_the_server_serving(
        echo: tuple[int, Echo]) -> None:
    port, writes = echo
    writes.delay = 0.2
    _, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(post("/echo", b"gone"))
    await w.drain()
    await asyncio.sleep(0.05)
    w.close()
    await asyncio.sleep(0.3)  # the answer comes for a closed connection: dropped
    writes.delay = 0.0
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(post("/echo", b"next"))
    assert (await read_response(r))[2] == b"lean:next"
    assert writes.taken == [b"gone", b"next"]
    w.close()
