"""The HTTP server of a node and of the ingest: lifespan, listening, graceful stop.

``await HttpServer(app, ...).serve(sock)`` runs the app's lifespan startup (a node's
opens its coordinator; a failure ends ``serve`` with status 3, the server never having
listened), serves connections with ``HttpProtocol`` (``protocol.py``) until ``stop()``
(thread-safe) or, with ``signals``, SIGINT/SIGTERM, then stops gracefully:

1. stop accepting; close idle keep-alive connections and peer connections; end streams
   (their apps see the client leave); a request in flight is answered, its connection
   closed after it;
2. wait for those answers up to ``grace_s`` (a second signal: at once), then cancel what
   is left;
3. run the lifespan shutdown (a node's closes the node: RocksDB closed, the cluster
   left) and return 0.

The ``date`` header is rendered once a second for every response. The server is
generic: a node plugs in its lean key lookups (``lean``) and its peer protocol on the
same port (``same_port``), the ingest its lean writes (``writes``).

Why a server of our own: docs/design.md, "The HTTP server" (uvicorn's public hooks cost
lookups 0.82x the throughput, granian 0.63x; its private ones tied us to one version).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import ssl
import threading
from collections.abc import Coroutine, MutableMapping
from email.utils import formatdate
from typing import Any, TypeVar

import uvloop

from streamiq.serving.http.asgi import ASGIApp
from streamiq.serving.http.http_limits import HttpEdge
from streamiq.serving.http.leanserve import LeanGets, LeanPosts
from streamiq.serving.http.protocol import KEEP_ALIVE_S, HttpProtocol, SamePort, ServerState

__all__ = ["STARTUP_FAILED", "HttpServer", "run"]

log = logging.getLogger("streamiq.http")

STARTUP_FAILED = 3  # serve()'s status when the lifespan startup failed
T = TypeVar("T")


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop: the event loop of a node's and the ingest's process
    (epoll and the transports in C; measured in docs/design.md, "The HTTP server")."""
    result: T = uvloop.run(main)
    return result
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class HttpServer:
    """One listening socket served until stopped."""

    def __init__(self, app: ASGIApp, *, edge: HttpEdge | None = None,
                 lean: LeanGets | None = None, writes: LeanPosts | None = None,
                 same_port: SamePort | None = None,
                 ssl_context: ssl.SSLContext | None = None,
                 lifespan: bool = True, grace_s: float = 5.0,
                 keep_alive_s: float = KEEP_ALIVE_S,
                 signals: bool = False, protocol: type[HttpProtocol] = HttpProtocol) -> None:
        self.state = ServerState(app, edge or HttpEdge(), lean, writes, same_port,
                                 keep_alive_s)
        self.ssl = ssl_context
        self.lifespan = Lifespan(app, self.state.app_state) if lifespan else None
        self.grace_s = grace_s
        self.protocol = protocol
        self.signals = signals  # SIGINT/SIGTERM stop it (a process's one server)
        self.started = False
        self._stop: asyncio.Event | None = None
        self._force = False
        self._asked = False  # stop() before serve() began
        self._loop: asyncio.AbstractEventLoop | None = None

    def stop(self) -> None:
        """Stop serving, gracefully (from any thread); a second call: without the grace."""
        if self._loop is None:
            self._asked = True
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stopping)

    def _stopping(self) -> None:
        if self._stop is None:
            return
        if self._stop.is_set():
            self._force = True
        self._stop.set()

    async def serve(self, sock: socket.socket) -> int:
        """Serve on ``sock`` (bound) until stopped: 0, or ``STARTUP_FAILED``."""
        loop = self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._asked:
            self._stop.set()
        if self.lifespan is not None and not await self.lifespan.startup():
            return STARTUP_FAILED
        self._date()
        state = self.state
        server = await loop.create_server(lambda: self.protocol(state), sock=sock,
                                          ssl=self.ssl, backlog=2048)
        handled = self._catch_signals(loop)
        self.started = True
        try:
            await self._stop.wait()
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)
            await self._shutdown(server)
        return 0

    def _catch_signals(self, loop: asyncio.AbstractEventLoop) -> list[int]:
        if not self.signals or threading.current_thread() is not threading.main_thread():
            return []  # stop() only
        for sig in _SIGNALS:
            loop.add_signal_handler(sig, self._stopping)
        return list(_SIGNALS)

    def _date(self) -> None:
        """The date header, rendered now and again every second while serving."""
        self.state.default_headers = (b"date: %s\r\nserver: streamiq\r\n"
                                      % formatdate(usegmt=True).encode())
        if not (self._stop is not None and self._stop.is_set()):
            asyncio.get_running_loop().call_later(1.0, self._date)

    async def _shutdown(self, server: asyncio.Server) -> None:
        state = self.state
        state.stopping = True
        server.close()
        for conn in list(state.connections):
            conn.shutdown()
        loop = asyncio.get_running_loop()
        until = loop.time() + self.grace_s
        while (any(c.busy() for c in state.connections) or state.tasks) and not self._force:
            if loop.time() >= until:
                log.warning("graceful stop: %d request(s) not answered within %.0f s; "
                            "cancelled", len(state.tasks), self.grace_s)
                break
            await asyncio.sleep(0.05)
        for task in list(state.tasks):
            task.cancel()
        for conn in list(state.connections):
            conn.transport.close()
        if state.tasks:
            await asyncio.wait(list(state.tasks), timeout=1.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(server.wait_closed(), 1.0)
        if self.lifespan is not None:
            await self.lifespan.shutdown()


class Lifespan:
    """The ASGI lifespan protocol: the app's startup and shutdown, run in one task."""

    def __init__(self, app: ASGIApp, state: dict[str, Any]) -> None:
        self.app = app
        self.state = state
        self._inbox: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
        self._said: dict[str, asyncio.Event] = {}
        self._task: asyncio.Task[None] | None = None
        self._failure: str | None = None

    def _event(self, name: str) -> asyncio.Event:
        return self._said.setdefault(name, asyncio.Event())

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"},
                 "state": self.state}
        try:
            await self.app(scope, self._inbox.get, self._send)
        except BaseException as exc:
            self._failure = f"{type(exc).__name__}: {exc}"
            log.error("the app's lifespan failed", exc_info=exc)
        finally:
            for event in self._said.values():
                event.set()

    async def _send(self, message: MutableMapping[str, Any]) -> None:
        kind = message["type"]
        if kind.endswith(".failed"):
            self._failure = message.get("message", "")
        self._event(kind.rsplit(".", 1)[0]).set()

    async def startup(self) -> bool:
        """Whether the app started (it said so)."""
        self._task = asyncio.create_task(self._run())
        done = self._event("lifespan.startup")
        await self._inbox.put({"type": "lifespan.startup"})
        await asyncio.wait([asyncio.ensure_future(done.wait()), self._task],
                           return_when=asyncio.FIRST_COMPLETED)
        if self._failure is not None:
            log.error("the app did not start: %s", self._failure)
            return False
        return True

    async def shutdown(self) -> None:
        if self._task is None or self._task.done():
            return
        done = self._event("lifespan.shutdown")
        await self._inbox.put({"type": "lifespan.shutdown"})
        await asyncio.wait([asyncio.ensure_future(done.wait()), self._task],
                           return_when=asyncio.FIRST_COMPLETED)
