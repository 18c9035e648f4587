"""The peer protocol end to end: the owner's side on the node port (a preface, the
cluster credential, typed requests, replies by id), an entry node forwarding over it,
and the owner's connection handling (limits, idle close, back-pressure, strangers)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from fakes import RecordingTransport
from waits import until

from streamiq.serving.cluster.wire import (
    MAX_REQUEST,
    PREFACE,
    REPLY,
    REQUEST,
    reply_frame,
    request_body,
    request_frame,
)
from streamiq.serving.http.protocol import HttpProtocol
from streamiq.serving.peer.server import PeerConnection
from streamiq.views.bank import BALANCES

A1 = "/v1/views/balances/keys/a1"
P1 = BALANCES.partition_of("a1", 3)
Serve = Callable[..., Awaitable[int]]


def lookup(key: str, p: int | None = None, count: int = 3, rid: int = 1) -> bytes:
    p = BALANCES.partition_of(key, count) if p is None else p
    return request_frame(rid, 10_000, request_body("lookup", {"view": "balances", "key": key},
                                                   [p], count, None))


async def read_reply(r: asyncio.StreamReader) -> tuple[int, int, bytes]:
    size, rid, status = REPLY.unpack(await r.readexactly(REPLY.size))
    return rid, status, await r.readexactly(size)


async def http_get(port: int, path: str, *extra: str) -> tuple[int, dict[str, str], bytes]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write("\r\n".join([f"GET {path} HTTP/1.1", "host: x", *extra, "", ""]).encode())
    head = (await r.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, _, v in (h.partition(": ") for h in head[1:] if h)}
    body = await r.readexactly(int(headers["content-length"]))
    w.close()
    return int(head[0].split()[1]), headers, body


async def test_the_node_port_speaks_the_peer_protocol_after_its_preface(
        app: Any, serve_node: Serve) -> None:
    reads: list[bytes] = []

    class Reading(HttpProtocol):
        def data_received(self, data: bytes) -> None:
            reads.append(data)
            super().data_received(data)

    port = await serve_node(app, protocol=Reading)
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(PREFACE[:5])  # the preface may arrive in pieces
    await until(lambda: reads, "the node to read the first piece")
    assert reads == [PREFACE[:5]]
    scan = request_frame(5, 10_000, request_body("scan", {"view": "balances", "prefix": "a"},
                                                 [0, 1, 2], 3, None))
    # the credential (no secret: "1"), then a scan's part and four lookups in one write
    w.write(PREFACE[5:] + b"1\n" + scan + lookup("a1", rid=1) + lookup("nobody", rid=2)
            + lookup("a1", count=6, rid=3)
            + request_frame(4, 10_000, request_body("nope", {}, [0], 3, None)))
    got = {rid: (status, body) for rid, status, body in [await read_reply(r) for _ in range(5)]}
    assert {rid: s for rid, (s, _) in got.items()} == {1: 200, 2: 404, 3: 421, 4: 400, 5: 200}
    _, _, body = await http_get(port, A1, "x-streamiq-forwarded: 1")
    assert got[1][1] == body  # byte for byte the row document HTTP answers
    assert json.loads(got[2][1])["code"] == "NOT_FOUND"
    assert json.loads(got[3][1])["code"] == "NOT_ACTIVE"
    part = json.loads(got[5][1])
    assert [row["key"] for row in part["partial"]["rows"]] == ["a1"] and part["not_active"] == []
    w.write(lookup("a1", rid=9))  # the connection stays open for more
    assert await read_reply(r) == (9, 200, body)
    w.close()
    status, headers, _ = await http_get(port, A1)  # HTTP on the same port is unaffected
    assert status == 200 and headers["x-streamiq-hops"] == "0"


async def test_an_entry_node_forwards_lookups_over_the_peer_protocol(
        app: Any, second_app: Any, serve_node: Serve) -> None:
    owner = await serve_node(app)
    second_app.deps.node.router.active = f"127.0.0.1:{owner}"
    hop = second_app.deps.coordinator.peers.hop
    port = await serve_node(second_app)
    _, _, direct = await http_get(owner, A1, "x-streamiq-forwarded: 1")
    r, w = await asyncio.open_connection("127.0.0.1", port)
    for _ in range(3):
        w.write(f"GET {A1} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
        head = (await r.readuntil(b"\r\n\r\n")).decode().split("\r\n")
        headers = {k: v for k, _, v in (h.partition(": ") for h in head[1:] if h)}
        body = await r.readexactly(int(headers["content-length"]))
        assert head[0] == "HTTP/1.1 200 OK" and body == direct
        assert headers["x-streamiq-hops"] == "1"
        assert headers["x-streamiq-served-by"] == f"127.0.0.1:{owner}"
    w.close()
    assert hop.answered() == 3
    # one connection to the owner, made once and pooled between the lookups
    assert hop.pool(f"127.0.0.1:{owner}") == {"idle": 1, "busy": 0, "waiting": 0}
    status, headers, body = await http_get(port, "/v1/views/balances/keys/nobody")
    assert status == 404 and headers["x-streamiq-hops"] == "1"
    assert json.loads(body)["code"] == "NOT_FOUND"
    status, _, body = await http_get(port, "/v1/views/balances/aggregate?agg=sum(balance)")
    assert status == 200 and json.loads(body)["groups"] == [{"sum(balance)": 5}]


class Server:
    """A peer server that answers every request ``200 {}`` (or raises ``fail``)."""

    def __init__(self, mark: bytes = b"1", fail: Exception | None = None) -> None:
        self.gate = SimpleNamespace(is_mark=lambda got: got == mark)
        self.asked: list[bytes] = []
        self.fail = fail

    def handle(self, rid: int, budget_ms: int, body: bytes, write: Any,
               waiting: Any = None) -> None:
        self.asked.append(body)
        write(reply_frame(rid, 200, b"{}"))


def frame(rid: int = 1) -> bytes:
    return request_frame(rid, 1000, b"{}")


async def test_a_connection_answers_each_read_and_closes_on_an_oversized_request() -> None:
    loop = asyncio.get_running_loop()
    t = RecordingTransport()
    server = Server()
    conn = PeerConnection(server, t, loop, 60)  # type: ignore[arg-type]
    conn.feed(b"1\n" + frame(1) + frame(2) + frame(3)[:5])
    assert t.writes == [reply_frame(1, 200, b"{}"), reply_frame(2, 200, b"{}")]
    conn.feed(frame(3)[5:])
    assert len(t.writes) == 3 and not t.closed
    conn.feed(REQUEST.pack(MAX_REQUEST + 1, 4, 1000))
    assert t.closed and len(server.asked) == 3
    conn.close()


class ManualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when the test moves it: its timers fire
    then, in order, and never because the machine was slow."""

    now = 0.0

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.run_until_complete(asyncio.sleep(0))  # one pass: the timers now due run


def test_a_connection_closes_only_after_a_whole_period_without_requests() -> None:
    """Like an idle HTTP keep-alive connection: closed once a whole ``idle_timeout``
    period passed without a request, never while requests keep coming."""
    loop, period = ManualClockLoop(), 30.0
    try:
        t = RecordingTransport()
        conn = PeerConnection(Server(), t, loop, period)  # type: ignore[arg-type]
        conn.feed(b"1\n")
        for i in range(5):  # a request in every period: open for as long as they come
            loop.advance(period)
            conn.feed(frame())
            assert not t.closed and len(t.writes) == i + 1
        loop.advance(period)  # the last request's period ends: not a whole period idle yet
        assert not t.closed
        loop.advance(period)  # a whole period without a request
        assert t.closed
        conn.close()
    finally:
        loop.close()


async def test_a_failing_request_is_a_500_and_the_connection_stays(
        app: Any, serve_node: Serve) -> None:
    def broken(*_: Any, **__: Any) -> Any:
        raise RuntimeError("boom")

    app.deps.queries.read = broken  # the store read of a lookup fails
    port = await serve_node(app)
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(PREFACE + b"1\n" + lookup("a1", rid=1))
    rid, status, body = await read_reply(r)
    assert (rid, status) == (1, 500) and json.loads(body)["code"] == "INTERNAL"
    w.write(lookup("a1", rid=2))
    assert (await read_reply(r))[:2] == (2, 500)  # still served
    w.close()


async def test_a_peer_that_pipelines_without_reading_is_paused_not_buffered(
        app: Any, serve_node: Serve) -> None:
    """While replies wait unread, the owner reads no more requests: the sender blocks
    (its own buffers fill) instead of the owner's memory growing; once the sender
    reads, every reply comes, in order."""
    port = await serve_node(app)
    r, w = await asyncio.open_connection("127.0.0.1", port)
    one_request = lookup("a1")
    n = (12 << 20) // len(one_request)  # 12 MB of requests: more than the sockets' buffers
    w.write(PREFACE + b"1\n" + one_request * n)
    with pytest.raises(TimeoutError):  # the owner stopped reading
        await asyncio.wait_for(w.drain(), 3)
    rid, status, body = await asyncio.wait_for(read_reply(r), 60)  # a hang guard
    assert status == 200
    one = reply_frame(rid, status, body)
    rest = await asyncio.wait_for(r.readexactly(len(one) * (n - 1)), 120)  # resumes it
    assert rest == one * (n - 1)  # every request answered, in order
    w.close()


def test_a_connection_without_the_cluster_credential_is_refused_before_any_request(
        ) -> None:
    t = RecordingTransport()
    server = Server(mark=b"the-mark")
    loop = asyncio.new_event_loop()
    try:
        conn = PeerConnection(server, t, loop, 60)  # type: ignore[arg-type]
        conn.feed(b"1\n" + frame())  # a guess, then a request in the same write
        conn.close()
    finally:
        loop.close()
    assert server.asked == [] and t.closed
    _, _, status = REPLY.unpack_from(t.writes[0])
    assert status == 401 and b"UNAUTHENTICATED" in t.writes[0]


def test_a_lookup_that_waits_for_a_position_or_a_staleness_bound_is_not_read_inline() -> None:
    from streamiq.serving.peer.server import _waits

    def doc(**fresh: Any) -> dict[str, Any]:
        return {"k": "lookup", "q": {"view": "balances", "key": "a1", "fresh": fresh}}

    assert _waits(doc(position="t:0:5"))
    assert _waits(doc(max_staleness_ms=0))  # 0 bounds too: "everything before I asked"
    assert not _waits(doc(max_lag=3))
    assert not _waits(doc(position=None, max_staleness_ms=None))
    assert not _waits({"k": "lookup", "q": "garbage"})
