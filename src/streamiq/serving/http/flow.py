"""A connection's flow control, and what an ASGI ``Cycle`` writes through
(``asgi.Connection``): a mixin of ``HttpProtocol`` (``protocol.py``).

Back-pressure: while the transport's buffer is past its high-water mark (the client is
not reading), the app's ``send()`` waits (``drain``); a peer connection stops being read
(a peer that pipelines without reading grew the node 83 -> 622 MB on 60 MB). Reading
pauses while pipelined requests wait for their turn or a body is not taken.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from streamiq.serving.changes.sockets import cap

__all__ = ["Flow", "Wire"]


class Wire(Protocol):
    """A connection of another protocol on the port (``protocol.SamePort.accept``: the
    node's peers): the bytes read go to it."""

    @property
    def authenticated(self) -> bool:
        """It proved who it is (the HTTP read deadline, for strangers, ends)."""

    def feed(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class Flow:
    """The writing and reading half of ``HttpProtocol`` (its state is the protocol's)."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    _wire: Wire | None
    _write_paused: bool
    _read_paused: bool
    _drained: asyncio.Future[None] | None

    def pause_writing(self) -> None:
        self._write_paused = True
        if self._wire is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drained is not None:
            if not self._drained.done():
                self._drained.set_result(None)
            self._drained = None
        if self._wire is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    def close(self) -> None:
        self.transport.close()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def streaming(self) -> None:
        """The response is an event stream: the socket holds little (``sockets.py``)."""
        cap(self.transport)

    def write_paused(self) -> bool:
        return self._write_paused

    async def drain(self) -> None:
        if self._write_paused:
            if self._drained is None:
                self._drained = self.loop.create_future()
            await self._drained

    def resume_reading(self) -> None:
        if self._read_paused:
            self._read_paused = False
            self.transport.resume_reading()

    def _pause_reading(self) -> None:
        if not self._read_paused:
            self._read_paused = True
            self.transport.pause_reading()
