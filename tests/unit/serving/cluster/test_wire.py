"""The lookup wire (serving/cluster/wire.py): the owner's side on the node port, the entry's
side in the hop client, and the fall back to HTTP hops for a peer that does not speak it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from fakes import RecordingTransport
from waits import until

from streamiq.serving.cluster.hop import HopClient
from streamiq.serving.cluster.wire import (
    MAX_LINE,
    PREFACE,
    WireServer,
    WireUnsupported,
    reply_frame,
    request_frame,
)
from streamiq.serving.http.protocol import NodeHttpProtocol
from streamiq.views.bank import BALANCES

A1 = "/v1/views/balances/keys/a1"
P1 = BALANCES.partition_of("a1", 3)
Serve = Callable[..., Awaitable[int]]


async def read_frame(r: asyncio.StreamReader) -> tuple[int, bytes]:
    status, length = (await r.readuntil(b"\n")).split()
    return int(status), await r.readexactly(int(length))


async def http_get(port: int, path: str, *extra: str) -> tuple[int, dict[str, str], bytes]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write("\r\n".join([f"GET {path} HTTP/1.1", "host: x", *extra, "", ""]).encode())
    head = (await r.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, _, v in (h.partition(": ") for h in head[1:] if h)}
    body = await r.readexactly(int(headers["content-length"]))
    w.close()
    return int(head[0].split()[1]), headers, body


async def test_the_node_port_speaks_the_wire_after_its_preface(app: Any, serve_node: Serve
                                                               ) -> None:
    reads: list[bytes] = []

    class Reading(NodeHttpProtocol):
        def data_received(self, data: bytes) -> None:
            reads.append(data)
            super().data_received(data)

    port = await serve_node(app, Reading)
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(PREFACE[:5])  # the preface may arrive in pieces
    await until(lambda: reads, "the node to read the first piece")
    assert reads == [PREFACE[:5]]
    # the credential (no secret: "1"), then four lookups in one write
    w.write(PREFACE[5:] + b"1\n" + request_frame(P1, 3, A1.encode(), b"-")
            + request_frame(BALANCES.partition_of("nobody", 3), 3,
                            b"/v1/views/balances/keys/nobody", b"-")
            + request_frame(P1, 6, A1.encode(), b"-") + b"%d /x\n" % P1)
    got = [await read_frame(r) for _ in range(4)]
    assert [s for s, _ in got] == [200, 404, 421, 400]  # in order
    _, headers, body = await http_get(port, A1, "x-streamiq-forwarded: 1")
    assert got[0][1] == body  # byte for byte what an HTTP hop gets
    assert json.loads(got[1][1])["code"] == "NOT_FOUND"
    assert json.loads(got[2][1])["code"] == "NOT_ACTIVE"
    w.write(request_frame(P1, 3, A1.encode(), b"-"))  # the connection stays open for more
    assert await read_frame(r) == (200, body)
    w.close()
    status, headers, _ = await http_get(port, A1)  # HTTP on the same port is unaffected
    assert status == 200 and headers["x-streamiq-hops"] == "0"


def entry_for(entry: Any, owner_port: int) -> Any:
    """The node app as an entry node that sees the owner as every partition's active."""
    entry.deps.node.router.active = f"127.0.0.1:{owner_port}"
    return entry


async def test_an_entry_node_forwards_lookups_over_the_wire(app: Any, second_app: Any,
                                                            serve_node: Serve) -> None:
    owner = await serve_node(app)
    entry = entry_for(second_app, owner)
    hop = entry.deps.coordinator.peers.hop
    port = await serve_node(entry)
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
    assert entry.deps.coordinator.peers.hop_stats() == {"wire": 3, "http": 0, "http_only_peers": []}
    # one connection to the owner, made once and pooled between the lookups
    assert hop.pool(f"127.0.0.1:{owner}") == {"idle": 1, "busy": 0, "waiting": 0}
    status, headers, body = await http_get(port, "/v1/views/balances/keys/nobody")
    assert status == 404 and headers["x-streamiq-hops"] == "1"
    assert json.loads(body)["code"] == "NOT_FOUND"


async def test_an_owner_without_the_wire_gets_http_hops(app: Any, second_app: Any,
                                                        serve_node: Serve,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    owner = await serve_node(app, http="httptools")  # stock uvicorn: 400 to the preface
    entry = entry_for(second_app, owner)
    hop = entry.deps.coordinator.peers.hop
    loop, connects = asyncio.get_running_loop(), list[tuple[Any, ...]]()
    real_connect = loop.create_connection

    def connect(*a: Any, **k: Any) -> Any:  # the entry's connections (not the test's)
        if not (len(a) > 2 and a[2] == port):
            connects.append(a)
        return real_connect(*a, **k)

    port = await serve_node(entry)
    monkeypatch.setattr(loop, "create_connection", connect)
    for _ in range(2):
        status, headers, body = await http_get(port, A1)
        assert status == 200 and json.loads(body)["value"]["balance"] == 5
        assert headers["x-streamiq-hops"] == "1"
    assert not hop.speaks_wire(f"127.0.0.1:{owner}")
    # both over HTTP (the pooled aiohttp session): one wire try, then one kept-alive
    # HTTP connection for both lookups
    assert len(connects) == 2
    assert entry.deps.coordinator.peers.hop_stats() == {"wire": 0, "http": 2,
                                                  "http_only_peers": [f"127.0.0.1:{owner}"]}


def client_reads(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """What the connections the code under test makes (not the test's own streams)
    read, one item per read."""
    loop = asyncio.get_running_loop()
    reads: list[bytes] = []
    real_connect = loop.create_connection

    def connect(factory: Callable[[], asyncio.Protocol], *a: Any, **k: Any) -> Any:
        def reading() -> asyncio.Protocol:
            protocol = factory()
            real = protocol.data_received

            def data_received(data: bytes) -> None:
                reads.append(data)
                real(data)

            protocol.data_received = data_received  # type: ignore[method-assign]
            return protocol

        return real_connect(reading, *a, **k)

    monkeypatch.setattr(loop, "create_connection", connect)
    return reads


async def test_hop_client_reads_a_reply_in_pieces_and_spots_an_http_peer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reads = client_reads(monkeypatch)
    pieces = (b"20", b"0 7\n{\"a\"", b":1}")

    async def owner(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        assert await r.readexactly(len(PREFACE) + 2) == PREFACE + b"1\n"  # + credential
        await r.readuntil(b"\n")
        for i, piece in enumerate(pieces):
            w.write(piece)
            sent = sum(map(len, pieces[:i + 1]))
            await until(lambda: sum(map(len, reads)) == sent, "the client to read a piece")  # noqa: B023
        await r.readuntil(b"\n")
        w.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")

    srv = await asyncio.start_server(owner, "127.0.0.1", 0)
    address = f"127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    hop = HopClient()
    reply = await hop.fetch(address, request_frame(0, 3, b"/x", b"-"))
    assert (reply.status, reply.body) == (200, b'{"a":1}') and len(reads) >= len(pieces)
    with pytest.raises(WireUnsupported):
        await hop.fetch(address, request_frame(0, 3, b"/x", b"-"))
    assert not hop.speaks_wire(address)
    assert not hop.lookup(address, b"0 3 /x\n", lambda _: None)  # HTTP hops for a while
    hop.close()
    srv.close()


async def test_wire_server_closes_on_an_overlong_line() -> None:
    loop = asyncio.get_running_loop()
    t = RecordingTransport()
    server = WireServer(lambda p, n, path, tok: (200, b"{}"), t, loop, 60,  # type: ignore[arg-type]
                        b"1")
    server.feed(b"1\n1 3 /a -\n1 3 /b -\n1 3 /c -")
    assert t.writes == [b"200 2\n{}200 2\n{}"] and not t.closed  # one write per read
    server.feed(b"x" * MAX_LINE)
    assert t.closed
    server.close()


class ManualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when the test moves it: its timers fire
    then, in order, and never because the machine was slow."""

    now = 0.0

    def time(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.run_until_complete(asyncio.sleep(0))  # one pass: the timers now due run


def test_wire_server_closes_a_connection_only_after_a_whole_period_without_requests(
        ) -> None:
    """Like an idle HTTP keep-alive connection: closed once a whole ``idle_timeout``
    period passed without a request, never while requests keep coming."""
    loop, period = ManualClockLoop(), 30.0
    try:
        t = RecordingTransport()
        server = WireServer(lambda p, n, path, tok: (200, b"{}"), t, loop,  # type: ignore[arg-type]
                            period, b"1")
        server.feed(b"1\n")
        for i in range(5):  # a request in every period: open for as long as they come
            loop.advance(period)
            server.feed(request_frame(0, 3, b"/a", b"-"))
            assert not t.closed and len(t.writes) == i + 1
        loop.advance(period)  # the last request's period ends: not a whole period idle yet
        assert not t.closed
        loop.advance(period)  # a whole period without a request
        assert t.closed
        server.close()
    finally:
        loop.close()


async def test_wire_server_answers_a_failing_lookup_with_500() -> None:
    def broken(p: int, n: int, path: bytes, token: bytes) -> tuple[int, bytes]:
        raise RuntimeError("boom")

    t = RecordingTransport()
    server = WireServer(broken, t, asyncio.get_running_loop(), 60, b"1")  # type: ignore[arg-type]
    server.feed(b"1\n" + request_frame(0, 3, b"/a", b"-"))
    assert t.writes[0].startswith(b"500 ") and not t.closed
    server.close()


async def test_a_peer_that_pipelines_without_reading_is_paused_not_buffered(
        app: Any, serve_node: Serve) -> None:
    """While replies wait unread, the owner reads no more requests: the sender blocks
    (its own buffers fill) instead of the owner's memory growing; once the sender
    reads, every reply comes, in order."""
    port = await serve_node(app)
    r, w = await asyncio.open_connection("127.0.0.1", port)
    frame = request_frame(P1, 3, A1.encode(), b"-")
    n = (12 << 20) // len(frame)  # 12 MB of requests: more than the sockets' buffers
    w.write(PREFACE + b"1\n" + frame * n)
    with pytest.raises(TimeoutError):  # the owner stopped reading
        await asyncio.wait_for(w.drain(), 3)
    status, body = await asyncio.wait_for(read_frame(r), 60)  # a hang guard, not a timing
    assert status == 200
    one = reply_frame(status, body)
    rest = await asyncio.wait_for(r.readexactly(len(one) * (n - 1)), 120)  # resumes it
    assert rest == one * (n - 1)  # every request answered, in order
    w.close()


def test_a_wire_without_the_cluster_credential_is_refused_before_any_lookup() -> None:
    asked: list[bytes] = []

    def lookup(p: int, n: int, path: bytes, token: bytes) -> tuple[int, bytes]:
        asked.append(path)
        return 200, b"{}"

    t = RecordingTransport()
    loop = asyncio.new_event_loop()
    try:
        server = WireServer(lookup, t, loop, 60, b"the-mark")  # type: ignore[arg-type]
        server.feed(b"1\n0 3 /a -\n")  # a guess, then a lookup in the same write
        server.close()
    finally:
        loop.close()
    assert asked == [] and t.closed
    assert t.writes[0].startswith(b"401 ") and b"UNAUTHENTICATED" in t.writes[0]
