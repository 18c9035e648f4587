"""A peer stream (``serving/cluster/stream.py``): its receiving socket capped before it
connects; frames as they come, with the stream paused while the caller takes none; a
refused, lost or silent peer is a ``PeerError``."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from streamiq.errors import PeerTimeout, PeerUnreachable
from streamiq.serving.cluster.stream import QUEUED, RECEIVE_BUFFER, connect, stream
from streamiq.serving.cluster.wire import PREFACE, REPLY, REQUEST

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def _frame(status: int, body: bytes) -> bytes:
    return REPLY.pack(len(body), 1, status) + body


async def _serve(handler: Handler) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, f"127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def _request(r: asyncio.StreamReader) -> bytes:
    """The preface, the credential line and one request frame's body."""
    assert await r.readexactly(len(PREFACE)) == PREFACE
    assert await r.readline() == b"mark\n"
    size, rid, _ = REQUEST.unpack(await r.readexactly(REQUEST.size))
    assert rid == 1
    return await r.readexactly(size)


async def _take(frames: AsyncIterator[tuple[int, bytes]], n: int) -> list[tuple[int, bytes]]:
    return [await anext(frames) for _ in range(n)]


def test_a_peer_stream_connects_with_its_receive_buffer_capped_first() -> None:
    async def run() -> int:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sock = await connect("127.0.0.1", port)
        try:
            assert not sock.getblocking()
            return int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
        finally:
            sock.close()
            server.close()

    assert asyncio.run(run()) <= 2 * RECEIVE_BUFFER  # Linux doubles it


def test_a_peer_that_refuses_is_an_oserror() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(OSError):
            asyncio.run(connect("127.0.0.1", port))
        with pytest.raises(PeerUnreachable):
            asyncio.run(_take(stream(f"127.0.0.1:{port}", "m", None, b"{}", 1.0), 1))


def test_frames_come_in_order_and_a_lost_or_silent_peer_is_a_peer_error() -> None:
    async def run() -> None:
        async def two_then_close(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            assert await _request(r) == b'{"q": 1}'
            w.write(_frame(200, b"a") + _frame(404, b"b"))
            await w.drain()
            w.close()

        server, address = await _serve(two_then_close)
        frames = stream(address, "mark", None, b'{"q": 1}', 5.0)
        assert await _take(frames, 2) == [(200, b"a"), (404, b"b")]
        with pytest.raises(PeerUnreachable):
            await anext(frames)
        server.close()

        async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await _request(r)
            await asyncio.sleep(5)

        server, address = await _serve(silent)
        with pytest.raises(PeerTimeout):
            await anext(stream(address, "mark", None, b"{}", 0.3))
        server.close()

    asyncio.run(run())


def test_a_caller_that_takes_nothing_stops_the_reading() -> None:
    """Past ``QUEUED`` frames waiting, the stream reads no more: the sender's writes wait
    in its own buffer, where it sees them (and coalesces), not in the receiver's."""
    async def run() -> int:
        unsent = asyncio.get_running_loop().create_future()

        async def flood(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            # the sender's kernel buffer bounded (autotuned it took up to tcp_wmem's
            # 4 MB, half of what is written here): what leaves asyncio's buffer is then
            # what the receiver reads
            w.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF,
                                                  1 << 16)
            await _request(r)
            for _ in range(QUEUED * 100):
                w.write(_frame(200, b"x" * 300))
            await asyncio.sleep(1.0)  # the receiver reads what it will
            unsent.set_result(w.transport.get_write_buffer_size())
            w.close()

        server, address = await _serve(flood)
        frames = stream(address, "mark", None, b"{}", 5.0)
        assert await _take(frames, 1) == [(200, b"x" * 300)]
        left = await unsent
        await frames.aclose()
        server.close()
        return int(left)

    # 25,600 frames of 307 bytes written: most still wait at the sender
    assert asyncio.run(run()) > QUEUED * 50 * 307
