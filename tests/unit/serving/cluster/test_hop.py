"""The peer protocol's client (serving/cluster/hop.py) against a real socket server
written for each case: pooled keep-alive connections, one request at a time each, the
deadline, the hedge point."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from waits import until

from streamiq.serving.cluster.hop import HopClient, PeerReply
from streamiq.serving.cluster.wire import PREFACE, REQUEST, reply_frame

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
FRAME = b'{"k":"lookup"}'  # a request's body (the client frames it)
_RIDS: dict[int, int] = {}  # the last request id per reader (a test peer's replies)
_LAST = [0]  # the last request id read by any test peer


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    """The next request's body (the connection's preface and credential first, when they
    come); its id is kept for the reply."""
    head = await reader.readexactly(REQUEST.size)
    if head == PREFACE[:REQUEST.size]:
        assert await reader.readexactly(len(PREFACE) - REQUEST.size) == PREFACE[REQUEST.size:]
        assert await reader.readuntil(b"\n") == b"1\n"  # the credential (no secret: "1")
        head = await reader.readexactly(REQUEST.size)
    size, rid, _ = REQUEST.unpack(head)
    _RIDS[id(reader)] = _LAST[0] = rid
    return await reader.readexactly(size)


def wire_reply(body: bytes, status: int = 200, rid: int | None = None) -> bytes:
    """A reply frame (to the request read last, unless ``rid`` says which)."""
    return reply_frame(_LAST[0] if rid is None else rid, status, body)


def soon(seconds: float = 10.0) -> float:
    return asyncio.get_running_loop().time() + seconds


async def fetch(hop: HopClient, address: str, timeout: float = 10.0) -> PeerReply:
    return await hop.fetch(address, FRAME, soon(timeout))


def idle(hop: HopClient, address: str) -> int:
    return hop.pool(address)["idle"]


def reply(body: bytes, status: str = "200 OK", extra: str = "") -> bytes:
    return (f"HTTP/1.1 {status}\r\ncontent-length: {len(body)}\r\n"
            f"x-streamiq-served-by: s\r\n{extra}\r\n").encode() + body


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
            w.write(wire_reply(body, rid=_RIDS[id(r)]))

    return handler


async def test_keep_alive_reuses_one_connection(serve: Callable[..., Awaitable[str]]) -> None:
    connections: list[object] = []
    requests: list[bytes] = []
    address = await serve(counting(read_frame, wire_reply, connections, requests))
    hop = HopClient()
    for i in range(1, 4):
        got = await fetch(hop, address)
        assert (got.status, got.body) == (200, b'{"n":%d}' % i)
    assert len(connections) == 1
    assert requests == [FRAME] * 3
    assert hop.answered() == 3
    hop.close()


async def test_stale_idle_connection_is_retried_once(serve: Callable[..., Awaitable[str]]) -> None:
    served: list[int] = []
    address = await serve(one_answer_each(read_frame, wire_reply, served))
    hop = HopClient()
    assert (await fetch(hop, address)).body == b"ok"
    assert (await fetch(hop, address)).body == b"ok"
    assert len(served) == 2
    hop.close()


async def test_peer_dying_mid_request_is_a_connection_error(
        serve: Callable[..., Awaitable[str]]) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_frame(r)
        w.write(wire_reply(b"x" * 100)[:40])
        await w.drain()
        w.close()

    address = await serve(handler)
    hop = HopClient()
    with pytest.raises(ConnectionError):
        await fetch(hop, address)
    assert not idle(hop, address)  # closed connections are not pooled


async def test_refused_and_slow_peers(serve: Callable[..., Awaitable[str]]) -> None:
    address = await serve(silent)
    hop = HopClient()
    with pytest.raises(TimeoutError):
        await fetch(hop, address, timeout=0.2)
    assert not idle(hop, address)
    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(ConnectionError):
        await fetch(hop, f"127.0.0.1:{port}")


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
        w.write(wire_reply(b"ok", rid=_RIDS[id(r)]))
        await w.drain()
        w.close()
        open_now -= 1

    address = await serve(handler)
    hop = HopClient(max_per_host=2)
    calls = [asyncio.create_task(fetch(hop, address)) for _ in range(5)]

    def settled() -> bool:  # every call holds a slot or waits, every slot's request arrived
        pool = hop.pool(address)
        return pool["busy"] + pool["waiting"] == 5 and asked == pool["busy"]

    await until(settled, "the five calls to be sent or queued")
    assert peak == 2 and hop.pool(address) == {"idle": 0, "busy": 2, "waiting": 3}
    release.set()
    assert [r.body for r in await asyncio.gather(*calls)] == [b"ok"] * 5
    assert peak == 2


def collect() -> tuple[list[Any], Callable[[PeerReply | None, Exception | None], None]]:
    got: list[Any] = []
    return got, lambda reply, exc: got.append(reply if exc is None else None)


async def test_call_uses_an_idle_connection_or_declines(
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
            w.write(wire_reply(b'{"n":%d}' % n, rid=_RIDS[id(r)]))

    address = await serve(handler)
    hop = HopClient(max_per_host=1)
    got, then = collect()
    assert not hop.call(address, FRAME, soon(), then)  # nothing pooled yet: the caller uses fetch()
    assert (await fetch(hop, address)).body == b'{"n":1}'
    assert hop.call(address, FRAME, soon(), then)
    assert not hop.call(address, FRAME, soon(), then)  # the one slot is taken
    await until(lambda: got, "the first reply")
    assert hop.call(address, FRAME, soon(), then)  # the connection went back to the pool
    await until(lambda: len(got) == 2, "the second reply")
    assert [r.body for r in got] == [b'{"n":2}', b'{"n":3}']
    assert len(connections) == 1
    hop.close()


async def test_call_times_out_and_never_pools_that_connection(
        serve: Callable[..., Awaitable[str]]) -> None:
    hung_up = asyncio.Event()

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_frame(r)
        w.write(wire_reply(b"first", rid=_RIDS[id(r)]))
        await read_frame(r)
        await r.read()  # no reply to the second request, until the client hangs up
        hung_up.set()

    address = await serve(handler)
    hop = HopClient()
    await fetch(hop, address)
    got, then = collect()
    assert hop.call(address, FRAME, soon(0.1), then)
    await asyncio.wait_for(hung_up.wait(), 10)  # a hang guard: the timeout closed it
    await until(lambda: got, "the failed lookup's report")
    assert got == [None]  # failed, reported once
    assert hop.pool(address) == {"idle": 0, "busy": 0, "waiting": 0}
    hop.close()


async def test_a_failing_reply_handler_does_not_break_the_pool(
        serve: Callable[..., Awaitable[str]]) -> None:
    address = await serve(wire_peer(b"ok"))
    hop = HopClient()
    await fetch(hop, address)

    called = asyncio.Event()

    def boom(reply: PeerReply | None, exc: Exception | None) -> None:
        called.set()
        raise RuntimeError("handler bug")

    assert hop.call(address, FRAME, soon(), boom)
    await asyncio.wait_for(called.wait(), 10)  # the pool's bookkeeping follows it at once
    assert hop.pool(address) == {"idle": 1, "busy": 0, "waiting": 0}
    assert (await fetch(hop, address)).body == b"ok"
    hop.close()


async def test_waiters_get_slots_in_turn_and_a_timed_out_waiter_gives_none_away(
        serve: Callable[..., Awaitable[str]]) -> None:
    gate = asyncio.Event()
    address = await serve(wire_peer(b"ok", gate))
    hop = HopClient(max_per_host=1)
    first = asyncio.create_task(fetch(hop, address))
    await until(lambda: hop.pool(address)["busy"] == 1, "the first call to take the slot")
    with pytest.raises(TimeoutError):  # waits for the one slot, gives up
        await fetch(hop, address, timeout=0.1)
    assert hop.pool(address) == {"idle": 0, "busy": 1, "waiting": 0}
    second = asyncio.create_task(fetch(hop, address))
    await until(lambda: hop.pool(address)["waiting"] == 1, "the second call to queue")
    gate.set()
    assert (await first).body == b"ok" and (await second).body == b"ok"
    assert hop.pool(address)["busy"] == 0 and hop.pool(address)["waiting"] == 0
    hop.close()


async def test_the_hedge_point_runs_slow_once_and_the_request_goes_on(
        serve: Callable[..., Awaitable[str]]) -> None:
    gate = asyncio.Event()
    address = await serve(wire_peer(b"late", gate))
    hop = HopClient()
    slow: list[float] = []
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    task = asyncio.ensure_future(hop.fetch(address, FRAME, soon(), lambda: slow.append(
        loop.time() - t0), t0 + 0.05))
    await until(lambda: slow, "the hedge point")
    assert len(slow) == 1 and slow[0] >= 0.05 and not task.done()  # still waiting
    gate.set()
    assert (await task).body == b"late"  # the slow answer still counts, once it comes
    assert len(slow) == 1
    hop.close()


async def test_a_big_reply_in_many_reads(serve: Callable[..., Awaitable[str]]) -> None:
    big = b"x" * 5_000_000
    address = await serve(wire_peer(big))
    hop = HopClient()
    assert (await fetch(hop, address)).body == big
    hop.close()
