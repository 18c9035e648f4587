"""The node-to-node hop client against a real socket server written for each case."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from streamiq.serving.hop import HopClient

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    return await reader.readuntil(b"\r\n\r\n")


def idle(hop: HopClient, address: str) -> list[object]:
    host = hop._hosts.get(address)
    return list(host.idle) if host else []


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


async def test_keep_alive_reuses_one_connection(serve: Callable[..., Awaitable[str]]) -> None:
    connections, requests = [], []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        connections.append(w)
        while not r.at_eof():
            try:
                requests.append(await read_request(r))
            except asyncio.IncompleteReadError:
                return
            w.write(reply(b'{"n":%d}' % len(requests)))

    address = await serve(handler)
    hop = HopClient()
    for i in range(1, 4):
        got = await hop.get(address, "/v1/x%20y", {"x-streamiq-forwarded": "1"})
        assert (got.status, got.body) == (200, b'{"n":%d}' % i)
        assert got.headers[b"x-streamiq-served-by"] == b"s"
    assert len(connections) == 1
    assert requests[0].startswith(b"GET /v1/x%20y HTTP/1.1\r\n")
    assert b"x-streamiq-forwarded: 1\r\n" in requests[0]
    hop.close()


async def test_stale_idle_connection_is_retried_once(serve: Callable[..., Awaitable[str]]) -> None:
    served = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        served.append(1)
        w.write(reply(b"ok"))
        await w.drain()
        w.close()  # the server drops the keep-alive connection after each answer

    address = await serve(handler)
    hop = HopClient()
    assert (await hop.get(address, "/", {})).body == b"ok"
    await asyncio.sleep(0.05)
    assert (await hop.get(address, "/", {})).body == b"ok"
    assert len(served) == 2
    hop.close()


async def test_chunked_reply_and_connection_close(serve: Callable[..., Awaitable[str]]) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n"
                b"connection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
        await w.drain()
        w.close()

    address = await serve(handler)
    hop = HopClient()
    got = await hop.get(address, "/", {})
    assert (got.status, got.body) == (404, b"abcde")
    assert not idle(hop, address)  # closed connections are not pooled
    hop.close()


async def test_peer_dying_mid_request_is_a_connection_error(
        serve: Callable[..., Awaitable[str]]) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
        await w.drain()
        w.close()

    address = await serve(handler)
    with pytest.raises(ConnectionError):
        await HopClient().get(address, "/", {})


async def test_refused_and_slow_peers(serve: Callable[..., Awaitable[str]]) -> None:
    async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    address = await serve(silent)
    hop = HopClient()
    with pytest.raises(TimeoutError):
        await hop.get(address, "/", {}, timeout=0.2)
    assert not idle(hop, address)
    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(ConnectionError):
        await hop.get(f"127.0.0.1:{port}", "/", {})


async def test_connections_per_host_are_capped(serve: Callable[..., Awaitable[str]]) -> None:
    open_now, peak = 0, 0
    release = asyncio.Event()

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal open_now, peak
        open_now += 1
        peak = max(peak, open_now)
        await read_request(r)
        await release.wait()
        w.write(reply(b"ok", extra="connection: close\r\n"))
        await w.drain()
        w.close()
        open_now -= 1

    address = await serve(handler)
    hop = HopClient(max_per_host=2)
    calls = [asyncio.create_task(hop.get(address, "/", {})) for _ in range(5)]
    await asyncio.sleep(0.2)
    assert peak == 2  # three requests wait for a slot
    release.set()
    assert [r.body for r in await asyncio.gather(*calls)] == [b"ok"] * 5
    assert peak == 2


def answering(body: bytes, gate: asyncio.Event | None = None) -> Handler:
    """A keep-alive peer answering every request with ``body`` (after ``gate``, if set)."""
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        while True:
            try:
                await read_request(r)
            except asyncio.IncompleteReadError:
                return
            if gate is not None:
                await gate.wait()
            w.write(reply(body))

    return handler


def collect() -> tuple[list[object], Callable[[object], None]]:
    got: list[object] = []
    return got, got.append


async def test_send_uses_an_idle_connection_or_declines(
        serve: Callable[..., Awaitable[str]]) -> None:
    connections: list[asyncio.StreamWriter] = []

    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        connections.append(w)
        n = 0
        while True:
            try:
                await read_request(r)
            except asyncio.IncompleteReadError:
                return
            n += 1
            w.write(reply(b'{"n":%d}' % n))

    address = await serve(handler)
    hop = HopClient(max_per_host=1)
    got, then = collect()
    assert not hop.send(address, "/", {}, then)  # nothing pooled yet: the caller uses get()
    assert (await hop.get(address, "/", {})).body == b'{"n":1}'
    assert hop.send(address, "/", {}, then)
    assert not hop.send(address, "/", {}, then)  # the one slot is taken
    while not got:
        await asyncio.sleep(0.01)
    assert hop.send(address, "/", {}, then)  # the connection went back to the pool
    while len(got) < 2:
        await asyncio.sleep(0.01)
    assert [r.body for r in got] == [b'{"n":2}', b'{"n":3}']  # type: ignore[attr-defined]
    assert len(connections) == 1
    hop.close()


async def test_send_times_out_and_never_pools_that_connection(
        serve: Callable[..., Awaitable[str]]) -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await read_request(r)
        w.write(reply(b"first"))
        await read_request(r)
        await asyncio.sleep(0.5)  # too late for the second request
        w.write(reply(b"late"))

    address = await serve(handler)
    hop = HopClient()
    await hop.get(address, "/", {})
    got, then = collect()
    assert hop.send(address, "/", {}, then, timeout=0.1)
    await asyncio.sleep(0.3)
    assert got == [None]  # failed, reported once
    assert not idle(hop, address) and hop._hosts[address].busy == 0
    hop.close()


async def test_a_failing_reply_handler_does_not_break_the_pool(
        serve: Callable[..., Awaitable[str]]) -> None:
    address = await serve(answering(b"ok"))
    hop = HopClient()
    await hop.get(address, "/", {})

    def boom(_: object) -> None:
        raise RuntimeError("handler bug")

    assert hop.send(address, "/", {}, boom)
    await asyncio.sleep(0.1)
    assert len(idle(hop, address)) == 1 and hop._hosts[address].busy == 0
    assert (await hop.get(address, "/", {})).body == b"ok"
    hop.close()


async def test_waiters_get_slots_in_turn_and_a_timed_out_waiter_gives_none_away(
        serve: Callable[..., Awaitable[str]]) -> None:
    gate = asyncio.Event()
    address = await serve(answering(b"ok", gate))
    hop = HopClient(max_per_host=1)
    first = asyncio.create_task(hop.get(address, "/", {}))
    await asyncio.sleep(0.05)
    with pytest.raises(TimeoutError):  # waits for the one slot, gives up
        await hop.get(address, "/", {}, timeout=0.1)
    second = asyncio.create_task(hop.get(address, "/", {}))
    await asyncio.sleep(0.05)
    gate.set()
    assert (await first).body == b"ok" and (await second).body == b"ok"
    assert hop._hosts[address].busy == 0 and not hop._hosts[address].waiters
    hop.close()
