"""The HTTP server's edge cases over real sockets, with small Starlette apps: bodies by
length and chunked, pipelining, HEAD, 100-continue, streams and a client leaving one,
an app that fails, garbage, keep-alive, the lifespan and a graceful stop."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from httpserve import closed_by_server, read_response, serving
from procs import free_port
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from streamiq.errors import PROBLEM_JSON, Unavailable
from streamiq.serving.http.server import STARTUP_FAILED, HttpServer


class Probe:
    """A small app and what happened in it."""

    def __init__(self) -> None:
        self.release = asyncio.Event()  # lets /slow answer
        self.slow_started = asyncio.Event()
        self.stream_ended = asyncio.Event()
        self.events: list[str] = []
        self.routes = Starlette(routes=[
            Route("/echo", self.echo, methods=["GET", "POST", "HEAD"]),
            Route("/slow", self.slow),
            Route("/stream", self.stream),
        ], lifespan=self.lifespan)

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/fail":  # no handler in between
            raise RuntimeError("a secret detail of the failure")
        if scope["type"] == "http" and scope["path"] == "/unavailable":  # a stream's
            raise Unavailable("no replica of 'v' partitions [0] within 30s")  # first wait
        await self.routes(scope, receive, send)

    @asynccontextmanager
    async def lifespan(self, _: Any) -> AsyncIterator[None]:
        self.events.append("startup")
        yield
        self.events.append("shutdown")

    async def echo(self, request: Request) -> Response:
        body = await request.body()
        return JSONResponse({"method": request.method, "n": len(body),
                             "body": body.decode()})

    async def slow(self, _: Request) -> Response:
        self.slow_started.set()
        await self.release.wait()
        self.events.append("slow answered")
        return PlainTextResponse("done")

    async def stream(self, _: Request) -> Response:
        async def events() -> AsyncIterator[bytes]:
            try:
                i = 0
                while True:
                    yield b"data: %d\n\n" % i
                    i += 1
                    await asyncio.sleep(0.01)
            finally:
                self.stream_ended.set()

        return StreamingResponse(events(), media_type="text/event-stream")


@pytest.fixture
def probe() -> Probe:
    return Probe()


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def answer(r: asyncio.StreamReader) -> tuple[int, Any]:
    """The next response's status and JSON document."""
    status, _, body = await asyncio.wait_for(read_response(r), 30)
    return status, json.loads(body)


def post(path: str, body: bytes, *extra: str) -> bytes:
    return "\r\n".join([f"POST {path} HTTP/1.1", "host: t", f"content-length: {len(body)}",
                        *extra, "", ""]).encode() + body


def chunked(path: str, *parts: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n".encode()
            + b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n")


async def test_bodies_by_length_and_chunked_pipelined_are_answered_in_order(
        probe: Probe) -> None:
    async with serving(probe.app) as port:
        r, w = await connect(port)
        w.write(b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n" + chunked("/echo", b"ab", b"cde")
                + post("/echo", b"xyz") + b"GET /echo HTTP/1.1\r\nhost: t\r\n\r\n"
                + chunked("/echo", b"q" * 70_000))
        await asyncio.wait_for(probe.slow_started.wait(), 30)
        probe.release.set()  # the first answer comes last: the others wait for it
        first = await asyncio.wait_for(read_response(r), 30)
        assert first[2] == b"done"
        got = [(await answer(r))[1] for _ in range(4)]
        assert [(g["method"], g["body"][:5], g["n"]) for g in got] == [
            ("POST", "abcde", 5), ("POST", "xyz", 3), ("GET", "", 0), ("POST", "qqqqq", 70_000)]
        w.close()


async def test_a_body_sent_in_pieces_reaches_the_app_whole(probe: Probe) -> None:
    async with serving(probe.app) as port:
        r, w = await connect(port)
        request = chunked("/echo", b"one-", b"two-", b"three")
        for i in range(0, len(request), 7):  # a few bytes at a time
            w.write(request[i:i + 7])
            await w.drain()
            await asyncio.sleep(0)
        assert await answer(r) == (200, {"method": "POST", "n": 13, "body": "one-two-three"})
        w.close()


async def test_head_sends_the_head_alone(probe: Probe) -> None:
    async with serving(probe.app) as port:
        r, w = await connect(port)
        w.write(b"HEAD /echo HTTP/1.1\r\nhost: t\r\n\r\nGET /echo HTTP/1.1\r\nhost: t\r\n\r\n")
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.1 200") and b"content-length: " in head
        # the next bytes are the GET's answer: no body was sent for HEAD
        assert await answer(r) == (200, {"method": "GET", "n": 0, "body": ""})
        w.close()


async def test_expect_100_continue_asks_for_the_body_first(probe: Probe) -> None:
    async with serving(probe.app) as port:
        r, w = await connect(port)
        w.write(b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-length: 4\r\n"
                b"expect: 100-continue\r\n\r\n")
        assert await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 30) == \
            b"HTTP/1.1 100 Continue\r\n\r\n"
        w.write(b"body")
        assert await answer(r) == (200, {"method": "POST", "n": 4, "body": "body"})
        w.close()


async def test_connection_close_from_the_client_closes_after_the_answer(probe: Probe) -> None:
    async with serving(probe.app) as port:
        r, w = await connect(port)
        w.write(b"GET /echo HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        status, headers, _ = await asyncio.wait_for(read_response(r), 30)
        assert status == 200 and headers["connection"] == "close"
        assert await closed_by_server(r)
        w.close()


async def test_a_failing_app_is_a_500_problem_without_its_traceback(probe: Probe) -> None:
    async with serving(probe.app) as port:
        r, w = await connect(port)
        w.write(b"GET /fail HTTP/1.1\r\nhost: t\r\n\r\n")
        status, headers, body = await asyncio.wait_for(read_response(r), 30)
        assert status == 500 and headers["content-type"] == PROBLEM_JSON
        assert json.loads(body)["code"] == "INTERNAL"
        assert b"secret" not in body and b"Traceback" not in body
        assert await closed_by_server(r)
        w.close()


async def test_an_error_of_the_hierarchy_before_any_byte_is_its_own_problem(
        probe: Probe) -> None:
    """A stream that fails before its first event (its head held back) with a
    ``streamiq.errors`` error answers that error's status and problem, not a 500."""
    async with serving(probe.app) as port:
        r, w = await connect(port)
        w.write(b"GET /unavailable HTTP/1.1\r\nhost: t\r\n\r\n")
        status, headers, body = await asyncio.wait_for(read_response(r), 30)
        assert status == 503 and headers["content-type"] == PROBLEM_JSON
        doc = json.loads(body)
        assert doc["code"] == "UNAVAILABLE" and "no replica of 'v'" in doc["detail"]
        assert await closed_by_server(r)
        w.close()


async def test_garbage_after_an_answer_is_a_400_and_the_connection_closed(
        probe: Probe) -> None:
    async with serving(probe.app) as port:
        r, w = await connect(port)
        w.write(b"GET /echo HTTP/1.1\r\nhost: t\r\n\r\n")
        assert (await asyncio.wait_for(read_response(r), 30))[0] == 200
        w.write(b"\x16\x03\x01 this is no request\r\n\r\n")
        status, headers, body = await asyncio.wait_for(read_response(r), 30)
        assert status == 400 and headers["content-type"] == PROBLEM_JSON
        assert json.loads(body)["code"] == "BAD_REQUEST" and await closed_by_server(r)
        w.close()


async def test_a_stream_is_flushed_per_event_and_ends_when_the_client_leaves(
        probe: Probe) -> None:
    async with serving(probe.app) as port:
        r, w = await connect(port)
        w.write(b"GET /stream HTTP/1.1\r\nhost: t\r\n\r\n")
        head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 30)
        assert b"text/event-stream" in head and b"transfer-encoding: chunked" in head
        seen = b""
        while b"data: 2\n\n" not in seen:  # each event arrives while the stream goes on
            seen += await asyncio.wait_for(r.read(4096), 30)
        assert not probe.stream_ended.is_set()
        w.close()  # the client leaves: the app's stream notices and ends
        await asyncio.wait_for(probe.stream_ended.wait(), 30)


async def test_keep_alive_connections_idle_past_the_timeout_are_closed(probe: Probe) -> None:
    sock = socket.create_server(("127.0.0.1", port := free_port()))
    server = HttpServer(probe.app, lifespan=False, keep_alive_s=0.2)
    task = asyncio.create_task(server.serve(sock))
    while not server.started:
        await asyncio.sleep(0.01)
    r, w = await connect(port)
    w.write(b"GET /echo HTTP/1.1\r\nhost: t\r\n\r\n")
    assert (await asyncio.wait_for(read_response(r), 30))[0] == 200
    assert await closed_by_server(r, within=30)  # idle: closed by the server
    w.close()
    server.stop()
    assert await asyncio.wait_for(task, 30) == 0


async def test_a_graceful_stop_answers_the_request_in_flight_then_shuts_down(
        probe: Probe) -> None:
    sock = socket.create_server(("127.0.0.1", port := free_port()))
    server = HttpServer(probe.app, lifespan=True, grace_s=30, keep_alive_s=3600)
    task = asyncio.create_task(server.serve(sock))
    while not server.started:
        await asyncio.sleep(0.01)
    assert probe.events == ["startup"]
    idle_r, idle_w = await connect(port)  # a keep-alive connection, idle at the stop
    idle_w.write(b"GET /echo HTTP/1.1\r\nhost: t\r\n\r\n")
    assert (await asyncio.wait_for(read_response(idle_r), 30))[0] == 200
    stream_r, stream_w = await connect(port)  # a stream, going on at the stop
    stream_w.write(b"GET /stream HTTP/1.1\r\nhost: t\r\n\r\n")
    await asyncio.wait_for(stream_r.readuntil(b"data: 1\n\n"), 30)
    r, w = await connect(port)
    w.write(b"GET /slow HTTP/1.1\r\nhost: t\r\n\r\n")
    await asyncio.wait_for(probe.slow_started.wait(), 30)
    server.stop()
    assert await closed_by_server(idle_r)  # the idle one at once
    await asyncio.wait_for(probe.stream_ended.wait(), 30)  # the stream ended
    assert (await asyncio.wait_for(stream_r.read(), 30)).endswith(b"0\r\n\r\n")
    with pytest.raises(OSError):  # no longer accepting
        await connect(port)
    assert not task.done() and probe.events == ["startup"]  # waiting for /slow
    probe.release.set()
    status, headers, body = await asyncio.wait_for(read_response(r), 30)
    assert (status, body, headers["connection"]) == (200, b"done", "close")
    assert await asyncio.wait_for(task, 30) == 0
    assert probe.events == ["startup", "slow answered", "shutdown"]
    for writer in (w, idle_w, stream_w):
        writer.close()


async def test_a_lifespan_that_fails_to_start_is_status_3_and_never_listens() -> None:
    @asynccontextmanager
    async def broken(_: Any) -> AsyncIterator[None]:
        raise RuntimeError("cannot open")
        yield

    sock = socket.create_server(("127.0.0.1", free_port()))
    server = HttpServer(Starlette(lifespan=broken))
    assert await asyncio.wait_for(server.serve(sock), 30) == STARTUP_FAILED
    assert not server.started
    sock.close()
