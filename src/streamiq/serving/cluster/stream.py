"""A peer stream: one request answered by a stream of reply frames, on a connection of
its own (a stream holds its connection for its life, so not the pooled ``HopClient``'s).

``stream`` connects (the receiving socket capped before the handshake: ``connect``),
sends the preface, the cluster credential and one request, then yields each reply
frame's (status, body) as it comes. When the caller stops taking frames, the connection
stops reading once ``QUEUED`` wait (TCP pushes back to the sender, which then holds or
coalesces what it would send). A connection that cannot be made or is lost raises
``PeerUnreachable``; ``hang_s`` without any frame while the caller waits for one,
``PeerTimeout`` (a sender that streams sends something at least every ``hang_s / 3``).

The entry node's side of a live subscription (``serving/changes/upstream.py``) reads
its events through it, and a partition snapshot's receiver (``copy.py``) its file.
What a stalled stream may hold in the kernel: little (``serving/changes/sockets.py`` for
the sending side).
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import AsyncGenerator
from ssl import SSLContext
from typing import cast

from streamiq.errors import PeerTimeout, PeerUnreachable
from streamiq.serving.cluster.wire import PREFACE, REPLY, request_frame

__all__ = ["QUEUED", "RECEIVE_BUFFER", "connect", "stream"]

QUEUED = 256  # frames held before the connection stops reading
#: A stream's receiving socket, set before it connects. Capped after the handshake, or
#: at 64 KiB, its window could not open again by a whole segment on loopback (MTU
#: 64 KiB): after a reader's stall the sender's bytes waited on TCP's persist timer,
#: measured 18-27 s after a 40 s stall (0.01 s with 32 KiB set first), and the sender
#: was taken for hung.
RECEIVE_BUFFER = 32 * 1024
_RID = 1


class _Frames(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.frames: deque[tuple[int, bytes]] = deque()
        self.lost: Exception | None = None
        self.wake = asyncio.Event()
        self._buf = bytearray()
        self._paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        start = 0
        while len(buf) - start >= REPLY.size:
            size, _, status = REPLY.unpack_from(buf, start)
            end = start + REPLY.size + size
            if len(buf) < end:
                break
            self.frames.append((status, bytes(buf[start + REPLY.size:end])))
            start = end
        del buf[:start]
        if len(self.frames) >= QUEUED and self.transport is not None:
            self.transport.pause_reading()
            self._paused = True
        self.wake.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = ConnectionResetError("the peer closed the stream" if exc is None
                                         else str(exc))
        self.wake.set()

    def take(self) -> tuple[int, bytes] | None:
        if not self.frames:
            return None
        frame = self.frames.popleft()
        if self._paused and len(self.frames) < QUEUED // 2 and self.transport is not None:
            self.transport.resume_reading()
            self._paused = False
        return frame


async def connect(host: str, port: int, receive_buffer: int | None = RECEIVE_BUFFER
                  ) -> socket.socket:
    """A connected non-blocking TCP socket whose receive buffer was capped at
    ``receive_buffer`` before the handshake (None: the system's, growing as it does;
    ``OSError`` if none of ``host``'s addresses answers)."""
    loop = asyncio.get_running_loop()
    error: OSError = OSError(f"{host}:{port}: no address")
    for family, kind, proto, _, addr in await loop.getaddrinfo(
            host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            if receive_buffer is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            await loop.sock_connect(sock, addr)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
        except BaseException:
            sock.close()
            raise
    raise error


async def stream(address: str, mark: str, ssl: SSLContext | None, body: bytes,
                 hang_s: float, receive_buffer: int | None = RECEIVE_BUFFER
                 ) -> AsyncGenerator[tuple[int, bytes]]:
    """The reply frames (status, body) to the request ``body`` sent to ``address``
    (``receive_buffer``: ``connect``'s; a bulk copy's is not capped)."""
    name, _, port = address.rpartition(":")
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(hang_s):
            transport, proto = await loop.create_connection(
                _Frames, sock=await connect(name, int(port), receive_buffer), ssl=ssl,
                server_hostname=name if ssl else None)
    except (OSError, TimeoutError) as exc:
        raise PeerUnreachable(address, exc) from exc
    try:
        transport.write(PREFACE + mark.encode() + b"\n" + request_frame(_RID, 0, body))
        while True:
            frame = proto.take()
            if frame is None:
                if proto.lost is not None:
                    raise PeerUnreachable(address, proto.lost)
                proto.wake.clear()
                try:
                    async with asyncio.timeout(hang_s):
                        await proto.wake.wait()
                except TimeoutError as exc:
                    raise PeerTimeout(address, exc) from exc
                continue
            yield frame
    finally:
        transport.close()
