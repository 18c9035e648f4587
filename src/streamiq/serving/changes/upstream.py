"""The entry node's side of a subscription to an owner over the peer protocol.

One connection of its own per upstream (a stream holds its connection for its life, so
not the pooled ``HopClient``'s): the preface and the cluster credential, one request of
kind ``changes``, then reply frames under that request's id, each an event
(``serving/peer/changes.py``). When the reader falls behind, the connection stops
reading (TCP pushes back to the owner, whose subscription coalesces). A connection that
is lost, an error frame, or ``HANG_S`` without any frame (the owner sends one at least
every second) raises ``PeerError``: the merge resumes the partitions elsewhere.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from ssl import SSLContext
from typing import Any, cast

import orjson

from streamiq.errors import PeerTimeout, PeerUnreachable, from_problem
from streamiq.serving.changes.sockets import connect
from streamiq.serving.changes.stream import Event
from streamiq.serving.cluster.wire import PREFACE, REPLY, request_body, request_frame

__all__ = ["HANG_S", "upstream"]

#: no frame for this long: the owner is taken for hung (its heartbeat is every 1 s)
HANG_S = 3.0
_RID = 1
_QUEUED = 256  # frames held before the connection stops reading


class _Stream(asyncio.Protocol):
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
        if len(self.frames) >= _QUEUED and self.transport is not None:
            self.transport.pause_reading()
            self._paused = True
        self.wake.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = ConnectionResetError("the owner closed the stream" if exc is None
                                         else str(exc))
        self.wake.set()

    def take(self) -> tuple[int, bytes] | None:
        if not self.frames:
            return None
        frame = self.frames.popleft()
        if self._paused and len(self.frames) < _QUEUED // 2 and self.transport is not None:
            self.transport.resume_reading()
            self._paused = False
        return frame


async def upstream(address: str, mark: str, ssl: SSLContext | None, query: dict[str, Any],
                   partitions: list[int], count: int, token: str | None
                   ) -> AsyncIterator[Event]:
    """The owner's events for ``query`` over ``partitions``; ``PeerError`` when the
    owner is gone, hangs or refuses."""
    name, _, port = address.rpartition(":")
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(HANG_S):  # little held in the kernel (sockets.py)
            transport, proto = await loop.create_connection(
                _Stream, sock=await connect(name, int(port)), ssl=ssl,
                server_hostname=name if ssl else None)
    except (OSError, TimeoutError) as exc:
        raise PeerUnreachable(address, exc) from exc
    try:
        body = request_body("changes", query, partitions, count, token)
        transport.write(PREFACE + mark.encode() + b"\n" + request_frame(_RID, 0, body))
        while True:
            frame = proto.take()
            if frame is None:
                if proto.lost is not None:
                    raise PeerUnreachable(address, proto.lost)
                proto.wake.clear()
                try:
                    async with asyncio.timeout(HANG_S):
                        await proto.wake.wait()
                except TimeoutError as exc:
                    raise PeerTimeout(address, exc) from exc
                continue
            status, raw = frame
            if status != 200:
                raise from_problem(status, raw)
            doc = orjson.loads(raw)
            data = doc.get("d")
            yield Event(data=None if data is None else orjson.dumps(data), id=doc.get("i"),
                        kind=doc.get("e"))
    finally:
        transport.close()
