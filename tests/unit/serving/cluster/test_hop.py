"""The node-to-node hop: the lookup wire's client (serving/cluster/hop.py) and the lean path's
HTTP hop through the coordinator's pooled aiohttp session, each against a real socket
server written for each case."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace

import pytest
from waits import until

from streamiq.config import Settings
from streamiq.errors import PeerUnreachable
from streamiq.serving.cluster.coordinator import TRANSPORT_ERRORS, Coordinator, peer_error
from streamiq.serving.cluster.hop import HopClient
from streamiq.serving.cluster.wire import PREFACE

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
FRAME = b"0 3 /v1/x%20y\n"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """The next wire request (the connection's preface and credential first, when they
    come)."""
    line = await reader.readuntil(b"\n")
    if line == PREFACE:
        assert await reader.readuntil(b"\n") == b"1\n"  # the credential (no secret: "1")
        line = await reader.readuntil(b"\n")
    return line


def idle(hop: HopClient, address: str) -> int:
    return hop.pool(address)["idle"]


def reply(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\ncontent-length: {len(body)}\r\n"
            f"x-streamiq-served-by: s\r\n{extra}\r\n").encode() + body


def wire_reply(body: bytes, status: int = 200) -> bytes:
    return b"%d %d\n" % (status, len(body)) + body


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> str:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        return f"127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for s in servers:
        s.close()


def counting(read: Callable[[asyncio.StreamReader], Awaitable[bytes]],
             answer: Callable[[bytes], bytes], connections: list[object],
             requests: list[bytes]) -> Handler:
    """A keep-alive peer answering request n with ``{"n":n}``; records what it saw."""
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        connections.append(w)
        while not r.at_eof():
            try:
                requests.append(await read(r))
            except asyncio.IncompleteReadError:
                return
            w.write(answer(b'{"n":%d}' % len(requests)))

    return handler


def one_answer_each(read: Callable[[asyncio.StreamReader], Awaitable[bytes]],
                    answer: Callable[[bytes], bytes], served: list[int]) -> Handler:
    """A peer that answers one request per connection: the next one on that connection
    finds it already closed (as after a server's idle timeout the client has not seen
    yet), without a byte of answer."""
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read(r)
        served.append(1)
        w.write(answer(b"ok"))
        await w.drain()
        try:
            await read(r)
        except asyncio.IncompleteReadError:
            return
        w.transport.abort()

    return handler


async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    """A peer that never answers: it reads until the client goes away."""
    await r.read()


@pytest.fixture
async def coordinator() -> AsyncIterator[Coordinator]:
    """A coordinator for its HTTP hop (its pooled aiohttp session) only."""
    c = Coordinator(SimpleNamespace(settings=Settings()))  # type: ignore[arg-type]
    yield c
    await c.close()


# -- the lean path's HTTP hop: Peers.http_hop on the pooled aiohttp session --

async def test_http_hop_keeps_one_connection_alive(serve: Callable[..., Awaitable[str]],
                                                   coordinator: Coordinator) -> None:
    connections: list[object] = []
    requests: list[bytes] = []
    address = await serve(counting(read_request, reply, connections, requests))
    for i in range(1, 4):
        got = await coordinator.peers.http_hop(address, "/v1/x%20y", {"x-streamiq-forwarded": "1"})
        assert (got.status, got.body) == (200, b'{"n":%d}' % i)
        assert got.headers[b"x-streamiq-served-by"] == b"s"
    assert len(connections) == 1
    assert requests[0].startswith(b"GET /v1/x%20y HTTP/1.1\r\n")
    assert b"x-streamiq-forwarded: 1\r\n" in requests[0]
    assert coordinator.peers.hop_stats()["http"] == 3


async def test_http_hop_retries_a_stale_idle_connection_once(
        serve: Callable[..., Awaitable[str]], coordinator: Coordinator) -> None:
    served: list[int] = []
    address = await serve(one_answer_each(read_request, reply, served))
    assert (await coordinator.peers.http_hop(address, "/", {})).body == b"ok"
    assert (await coordinator.peers.http_hop(address, "/", {})).body == b"ok"
    assert len(served) == 2


async def test_http_hop_chunked_reply_and_connection_close(
        serve: Callable[..., Awaitable[str]], coordinator: Coordinator) -> None:
    connections = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        connections.append(w)
        await read_request(r)
        w.write(b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n"
                b"connection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        await w.drain()
        w.close()

    address = await serve(handler)
    for _ in range(2):
        got = await coordinator.peers.http_hop(address, "/", {})
        assert (got.status, got.body) == (404, b"abcde")
    assert len(connections) == 2  # closed connections are not pooled


async def test_http_hop_failures_are_transport_errors(
        serve: Callable[..., Awaitable[str]], coordinator: Coordinator) -> None:
    async def dying(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await w.drain()
        w.close()

    with pytest.raises(TRANSPORT_ERRORS):  # what the lean path catches, then the route
        await coordinator.peers.http_hop(await serve(dying), "/", {})
    with pytest.raises(TimeoutError):
        await coordinator.peers.http_hop(await serve(silent), "/", {}, timeout=0.2)
    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(TRANSPORT_ERRORS) as refused:
        await coordinator.peers.http_hop(f"127.0.0.1:{port}", "/", {})
    assert isinstance(peer_error("x", refused.value), PeerUnreachable)


# -- the lookup wire's client --

def wire_peer(body: bytes, gate: asyncio.Event | None = None,
              connections: list[asyncio.StreamWriter] | None = None) -> Handler:
    """A peer speaking the wire, answering every lookup with ``body`` (after ``gate``)."""
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        if connections is not None:
            connections.append(w)
        while True:
            try:
                await read_frame(r)
            except asyncio.IncompleteReadError:
                return
            if gate is not None:
                await gate.wait()
            w.write(wire_reply(body))

    return handler


async def test_keep_alive_reuses_one_connection(serve: Callable[..., Awaitable[str]]) -> None:
    connections: list[object] = []
    requests: list[bytes] = []
    address = await serve(counting(read_frame, wire_reply, connections, requests))
    hop = HopClient()
    for i in range(1, 4):
        got = await hop.fetch(address, FRAME)
        assert (got.status, got.body) == (200, b'{"n":%d}' % i)
    assert len(connections) == 1
    assert requests == [FRAME] * 3
    assert hop.stats() == {"wire": 3, "http_only_peers": []}
    hop.close()


async def test_stale_idle_connection_is_retried_once(serve: Callable[..., Awaitable[str]]) -> None:
    served: list[int] = []
    address = await serve(one_answer_each(read_frame, wire_reply, served))
    hop = HopClient()
    assert (await hop.fetch(address, FRAME)).body == b"ok"
    assert (await hop.fetch(address, FRAME)).body == b"ok"
    assert len(served) == 2
    hop.close()


async def test_peer_dying_mid_request_is_a_connection_error(
        serve: Callable[..., Awaitable[str]]) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_frame(r)
        w.write(b"200 100\npartial")
        await w.drain()
        w.close()

    address = await serve(handler)
    hop = HopClient()
    with pytest.raises(ConnectionError):
        await hop.fetch(address, FRAME)
    assert not idle(hop, address)  # closed connections are not pooled


async def test_refused_and_slow_peers(serve: Callable[..., Awaitable[str]]) -> None:
    address = await serve(silent)
    hop = HopClient()
    with pytest.raises(TimeoutError):
        await hop.fetch(address, FRAME, timeout=0.2)
    assert not idle(hop, address)
    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(ConnectionError):
        await hop.fetch(f"127.0.0.1:{port}", FRAME)


async def test_connections_per_host_are_capped(serve: Callable[..., Awaitable[str]]) -> None:
    open_now, peak, asked = 0, 0, 0
    release = asyncio.Event()

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal open_now, peak, asked
        open_now += 1
        peak = max(peak, open_now)
        await read_frame(r)
        asked += 1
        await release.wait()
        w.write(wire_reply(b"ok"))
        await w.drain()
        w.close()
        open_now -= 1

    address = await serve(handler)
    hop = HopClient(max_per_host=2)
    calls = [asyncio.create_task(hop.fetch(address, FRAME)) for _ in range(5)]

    def settled() -> bool:  # every call holds a slot or waits, every slot's request arrived
        pool = hop.pool(address)
        return pool["busy"] + pool["waiting"] == 5 and asked == pool["busy"]

    await until(settled, "the five calls to be sent or queued")
    assert peak == 2 and hop.pool(address) == {"idle": 0, "busy": 2, "waiting": 3}
    release.set()
    assert [r.body for r in await asyncio.gather(*calls)] == [b"ok"] * 5
    assert peak == 2


def collect() -> tuple[list[object], Callable[[object], None]]:
    got: list[object] = []
    return got, got.append


async def test_lookup_uses_an_idle_connection_or_declines(
        serve: Callable[..., Awaitable[str]]) -> None:
    connections: list[asyncio.StreamWriter] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        connections.append(w)
        n = 0
        while True:
            try:
                await read_frame(r)
            except asyncio.IncompleteReadError:
                return
            n += 1
            w.write(wire_reply(b'{"n":%d}' % n))

    address = await serve(handler)
    hop = HopClient(max_per_host=1)
    got, then = collect()
    assert not hop.lookup(address, FRAME, then)  # nothing pooled yet: the caller uses fetch()
    assert (await hop.fetch(address, FRAME)).body == b'{"n":1}'
    assert hop.lookup(address, FRAME, then)
    assert not hop.lookup(address, FRAME, then)  # the one slot is taken
    await until(lambda: got, "the first reply")
    assert hop.lookup(address, FRAME, then)  # the connection went back to the pool
    await until(lambda: len(got) == 2, "the second reply")
    assert [r.body for r in got] == [b'{"n":2}', b'{"n":3}']  # type: ignore[attr-defined]
    assert len(connections) == 1
    hop.close()


async def test_lookup_times_out_and_never_pools_that_connection(
        serve: Callable[..., Awaitable[str]]) -> None:
    hung_up = asyncio.Event()

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_frame(r)
        w.write(wire_reply(b"first"))
        await read_frame(r)
        await r.read()  # no reply to the second request, until the client hangs up
        hung_up.set()

    address = await serve(handler)
    hop = HopClient()
    await hop.fetch(address, FRAME)
    got, then = collect()
    assert hop.lookup(address, FRAME, then, timeout=0.1)
    await asyncio.wait_for(hung_up.wait(), 10)  # a hang guard: the timeout closed it
    await until(lambda: got, "the failed lookup's report")
    assert got == [None]  # failed, reported once
    assert hop.pool(address) == {"idle": 0, "busy": 0, "waiting": 0}
    hop.close()


async def test_a_failing_reply_handler_does_not_break_the_pool(
        serve: Callable[..., Awaitable[str]]) -> None:
    address = await serve(wire_peer(b"ok"))
    hop = HopClient()
    await hop.fetch(address, FRAME)

    called = asyncio.Event()

    def boom(_: object) -> None:
        called.set()
        raise RuntimeError("handler bug")

    assert hop.lookup(address, FRAME, boom)
    await asyncio.wait_for(called.wait(), 10)  # the pool's bookkeeping follows it at once
    assert hop.pool(address) == {"idle": 1, "busy": 0, "waiting": 0}
    assert (await hop.fetch(address, FRAME)).body == b"ok"
    hop.close()


async def test_waiters_get_slots_in_turn_and_a_timed_out_waiter_gives_none_away(
        serve: Callable[..., Awaitable[str]]) -> None:
    gate = asyncio.Event()
    address = await serve(wire_peer(b"ok", gate))
    hop = HopClient(max_per_host=1)
    first = asyncio.create_task(hop.fetch(address, FRAME))
    await until(lambda: hop.pool(address)["busy"] == 1, "the first call to take the slot")
    with pytest.raises(TimeoutError):  # waits for the one slot, gives up
        await hop.fetch(address, FRAME, timeout=0.1)
    assert hop.pool(address) == {"idle": 0, "busy": 1, "waiting": 0}
    second = asyncio.create_task(hop.fetch(address, FRAME))
    await until(lambda: hop.pool(address)["waiting"] == 1, "the second call to queue")
    gate.set()
    assert (await first).body == b"ok" and (await second).body == b"ok"
    assert hop.pool(address)["busy"] == 0 and hop.pool(address)["waiting"] == 0
    hop.close()
