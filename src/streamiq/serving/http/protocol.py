"""One HTTP connection of a node or the ingest, on httptools: our own protocol, no server
framework's private methods. Generic: what it serves besides the ASGI app is given to
the server as protocols (``SamePort``, ``leanserve.LeanGets``, ``leanserve.LeanPosts``),
never imported.

What it does with the bytes it reads:

* a connection that opens with another protocol's preface (``SamePort``: the node's
  peer protocol, ``serving/peer/server.py``) is handed to it instead of HTTP;
* each request is counted against the limits of ``http_limits.py`` as it is parsed
  (431, 413, the gate, 408 for a request not read whole in time, 400 for what is not
  HTTP), refused with a problem document and a lingering close;
* a GET the lean path (``LeanGets``: the node's key lookups, ``fastpath.py``) answers skips ASGI:
  answered inside the parser callback when local, or from the hop's ``data_received``
  when forwarded on a pooled connection (a hop that must connect or wait runs in a
  task), in one write;
* everything else is served to the app as ASGI (``asgi.py``: ``Cycle``), in a task;
  pipelined requests are answered in order (reading pauses while one waits);
* keep-alive: a connection idle between requests is closed after the keep-alive time
  (one timer per connection, moved on when it fires, so within twice that); on a
  graceful stop (``shutdown``) idle connections close at once, the request in flight
  is finished and its connection closed after it, a stream is ended.

Back-pressure: while the transport's buffer is past its high-water mark (the client is
not reading), the app's ``send()`` waits (``drain``); a peer connection stops being read
(a peer that pipelines without reading grew the node 83 -> 622 MB on 60 MB). Reading
pauses while pipelined requests wait for their turn or a body is not taken. What it
answers without ASGI is ``leanserve.LeanServing``'s (one per server, given the
connection).

Measured with bench/bench_queries.py (docs/design.md, "The HTTP server").
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote

import httptools

from streamiq.errors import BadRequest, RequestTimeout, StreamiqError
from streamiq.serving.changes.sockets import cap
from streamiq.serving.http.asgi import ASGIApp, Cycle, Scope
from streamiq.serving.http.http_limits import (
    LINGER_S,
    MAX_HEAD_BYTES,
    HttpEdge,
    ReadBounds,
    check_head,
    head_too_large,
    refusal,
)
from streamiq.serving.http.leanserve import LeanGets, LeanPosts, LeanServing, PostRoute

__all__ = ["KEEP_ALIVE_S", "HttpProtocol", "SamePort", "ServerState", "Wire"]


class Wire(Protocol):
    """A connection of another protocol on the port (``protocol.SamePort.accept``: the
    node's peers): the bytes read go to it."""

    @property
    def authenticated(self) -> bool:
        """It proved who it is (the HTTP read deadline, for strangers, ends)."""

    def feed(self, data: bytes) -> None: ...

    def close(self) -> None: ...


class SamePort(Protocol):
    """Another protocol served on the server's port (the node's peer protocol), told
    apart from HTTP by the ``preface`` its connections open with."""

    @property
    def preface(self) -> bytes: ...

    def accept(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop,
               keep_alive_s: float) -> Wire:
        """Serve the connection (its preface read)."""

#: a keep-alive connection idle this long is closed (seconds): longer than the pools of
#: common clients keep one (httpx 5 s, aiohttp 15 s), as nginx's 75 s is, so the client
#: drops it first. At 5 s (uvicorn's), a plain httpx client's read was now and then sent
#: on a connection as the node closed it ("Server disconnected without sending a
#: response"); a connection costs the node a few kB while it idles
KEEP_ALIVE_S = 75.0

_BODY_BUFFER = 65536  # request body bytes held for the app before reading pauses
_ASGI = {"version": "3.0", "spec_version": "2.3"}


@dataclass(eq=False)
class ServerState:
    """What every connection of one server shares."""

    app: ASGIApp
    edge: HttpEdge = field(default_factory=HttpEdge)
    lean: LeanGets | None = None  # GETs answered without ASGI (the node's key lookups)
    writes: LeanPosts | None = None  # writes answered without ASGI (the ingest's)
    same_port: SamePort | None = None  # another protocol on the port (the node's peers)
    keep_alive_s: float = KEEP_ALIVE_S
    default_headers: bytes = b"server: streamiq\r\n"
    app_state: dict[str, Any] = field(default_factory=dict)  # the lifespan's state
    connections: set[HttpProtocol] = field(default_factory=set)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    stopping: bool = False
    serving: LeanServing = field(init=False)  # the answers without ASGI (leanserve.py)

    def __post_init__(self) -> None:
        self.serving = LeanServing(self)


class HttpProtocol(asyncio.Protocol):
    """``loop.create_server(lambda: HttpProtocol(state), ...)``."""

    state: ServerState

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.loop = asyncio.get_running_loop()
        self.edge = state.edge
        self.serving = state.serving
        self.posting: tuple[Cycle, PostRoute] | None = None  # a lean write waiting
        self.parser = httptools.HttpRequestParser(self)
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.client: tuple[str, int] | None = None
        self.server: tuple[str, int] | None = None
        self.scheme = "http"
        self.bounds = ReadBounds()
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._expect = False
        self._in_head = True  # reading a request's line and headers (or waiting for one)
        self._refused = False  # answered 4xx here: ignore the rest of what is read
        self._deadline: float | None = None  # when the request being read must be whole
        self._idle_at: float | None = None  # when the last response ended (none since)
        self._timer: asyncio.TimerHandle | None = None
        self.reading: Cycle | None = None  # the request being read (its body goes there)
        self.current: Cycle | None = None  # the request being answered
        self.queue: deque[Cycle] = deque()  # pipelined requests read, not yet answered
        self._read_paused = False
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._first: bytes | None = b""  # a new connection's first bytes, until known
        self._wire: Wire | None = None
        self._same_port = state.same_port

    # --- asyncio ---

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no subclass
        self.state.connections.add(self)
        peer, local = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
        self.client = (peer[0], peer[1]) if isinstance(peer, tuple) else None
        self.server = (local[0], local[1]) if isinstance(local, tuple) else None
        self.scheme = "https" if transport.get_extra_info("sslcontext") else "http"
        self._deadline = self.loop.time() + self.edge.request_read_timeout_s
        self._timer = self.loop.call_at(min(self._deadline, self.loop.time()
                                            + self.state.keep_alive_s), self._tick)

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._wire is not None:
            self._wire.close()
        for cycle in (self.current, *self.queue):
            if cycle is not None:
                cycle.gone()
        self.resume_writing()

    def data_received(self, data: bytes) -> None:
        if self._wire is not None:
            self._wire.feed(data)
            if self._wire.authenticated:  # a peer: the read deadline was for strangers
                self._deadline = None
            return
        if self._first is not None and self._same_port is not None:  # HTTP, or the other?
            data = self._first + data
            preface = self._same_port.preface
            if len(data) < len(preface) and preface.startswith(data):
                self._first = data
                return
            self._first = None
            if data.startswith(preface):
                self._wire = self._same_port.accept(self.transport, self.loop,
                                                    self.state.keep_alive_s)
                self.data_received(data[len(preface):])
                return
        self._idle_at = None
        while data and not self._refused:  # a head is fed to the parser up to its limit
            if not self._in_head:
                self._parse(data)
                return
            room = self.bounds.room()
            part, data = data[:room], data[room:]
            self.bounds.fed += len(part)
            self._parse(part)
            if self._in_head and self.bounds.fed > MAX_HEAD_BYTES and not self._refused:
                self._refuse(head_too_large())

    def eof_received(self) -> bool | None:
        return None  # the transport closes: a half-closed client gets no answer

    @property
    def default_headers(self) -> bytes:  # asgi.Connection
        return self.state.default_headers

    def answered(self, cycle: Cycle) -> None:
        """``cycle``'s response is complete: the next request, or keep-alive."""
        self.current = None
        if not cycle.keep_alive:
            self.transport.close()
            return
        if self.transport.is_closing():
            return
        self.resume_reading()
        if self.queue:
            self._start(self.queue.popleft())
        else:
            self._idle_at = self.loop.time()

    # --- the parser's callbacks ---

    def _parse(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # no upgrades: answered, then closed
            if self.reading is not None:
                self.reading.keep_alive = False
            self._refused, self._deadline = True, None
        except httptools.HttpParserError as exc:
            if not self._refused:
                self._refuse(BadRequest(f"not an HTTP/1.1 request: {exc}"))

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = []
        self._expect = False
        self.bounds.begin()
        self._idle_at = None
        if self._deadline is None:
            self._deadline = self.loop.time() + self.edge.request_read_timeout_s

    def on_url(self, url: bytes) -> None:
        if not self._refused:
            self._url += url
            self._check(self.bounds.add_head(len(url)))

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused or self._check(self.bounds.add_header(len(name) + len(value) + 4)):
            return
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self._expect = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        parser = self.parser
        method = parser.get_method()
        try:
            check_head(self.edge, method, self._headers)
            target = httptools.parse_url(self._url)
            raw = target.path
            path = raw.decode("ascii")
        except StreamiqError as err:
            self._refuse(err)
            return
        except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
            self._refuse(BadRequest("the request target is not a URL path"))
            return
        self._in_head = False
        version = parser.get_http_version()
        keep_alive = (version != "1.0" and parser.should_keep_alive()
                      and not self.state.stopping)
        cycle = self.reading = Cycle(self, method.decode("ascii"),
                                     unquote(path) if "%" in path else path, raw,
                                     target.query or b"", self._headers, version, keep_alive,
                                     self._expect)
        if self.current is None:
            self._start(cycle)
        else:  # pipelined: answered in turn
            self.queue.append(cycle)
            self._pause_reading()

    def on_body(self, body: bytes) -> None:
        if self._refused or self._check(self.bounds.add_body(len(body))):
            return
        cycle = self.reading
        if cycle is None or not cycle.busy:
            return
        cycle.body += body
        if self.posting is not None and self.posting[0] is cycle:
            self.serving.post_body(self, cycle)
        if len(cycle.body) > _BODY_BUFFER:
            self._pause_reading()
        cycle.wake()

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._in_head, self._deadline = True, None  # read whole, in time
        self.bounds.ended()
        if self.reading is not None:
            self.reading.more_body = False
            self.reading.wake()
            if self.posting is not None and self.posting[0] is self.reading:
                self.serving.posted(self)

    # --- answering (without ASGI: leanserve.py) ---

    def _start(self, cycle: Cycle) -> None:
        self.current = cycle
        self.serving.start(self, cycle)

    def run(self, cycle: Cycle, app: ASGIApp) -> None:
        """Serve ``cycle`` to ``app`` as ASGI, in a task."""
        self.track(cycle.run(app, self._scope(cycle)))

    def track(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as a task a graceful stop waits for."""
        task = self.loop.create_task(work)
        self.state.tasks.add(task)
        task.add_done_callback(self.state.tasks.discard)

    def _scope(self, cycle: Cycle) -> Scope:
        return {"type": "http", "asgi": _ASGI, "http_version": cycle.version,
                "server": self.server, "client": self.client, "scheme": self.scheme,
                "method": cycle.method, "root_path": "", "path": cycle.path,
                "raw_path": cycle.raw_path, "query_string": cycle.query,
                "headers": cycle.headers, "state": self.state.app_state.copy()}

    # --- flow control, and what a Cycle writes through (asgi.Connection) ---

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

    # --- time: the read deadline and keep-alive on one timer, moved on when it fires ---

    def _tick(self) -> None:
        self._timer = None
        if self._refused or self.transport.is_closing():
            return
        if self._wire is not None and self._deadline is None:
            return  # a peer: its own idle timer (PeerConnection)
        now = self.loop.time()
        at = now + self.state.keep_alive_s
        if self._deadline is not None:
            if self._read_paused:  # the server holds the request back, not the client
                self._deadline = now + self.edge.request_read_timeout_s
            if now >= self._deadline:
                t = self.edge.request_read_timeout_s
                self._refuse(RequestTimeout(f"the request was not received whole within "
                                            f"{t:g} s", limit_s=t))
                return
            at = min(at, self._deadline)
        elif self._idle_at is not None and self.current is None:
            if now - self._idle_at >= self.state.keep_alive_s:
                self.transport.close()
                return
            at = self._idle_at + self.state.keep_alive_s
        self._timer = self.loop.call_at(at, self._tick)

    # --- refusing, stopping ---

    def _check(self, err: StreamiqError | None) -> bool:
        if err is not None:
            self._refuse(err)
        return err is not None

    def _answerable(self) -> bool:
        """Whether a refusal may be answered: not while a response is being written. In
        a body, the request's own app is cut off (its receive() sees a disconnect)."""
        if self._wire is not None:  # a stranger stalling on the wire gets no HTTP answer
            return False
        if not self._in_head and self.reading is not None:
            self.reading.gone()
            return self.current is self.reading and not self.reading.started
        return self.current is None

    def _refuse(self, err: StreamiqError) -> None:
        """Answer the error (when no response is under way) and end the connection; read
        nothing more of it into memory.

        A lingering close, as nginx does: the answer is followed by a FIN, and what the
        client still sends is read and dropped for ``LINGER_S`` before the socket is
        closed. Closing at once would make the kernel answer the unread bytes with a
        reset, which a client still writing its body sees instead of the answer."""
        self._refused = True
        self._deadline = None
        self.edge.refusals.note(err, self.client)
        if not self._answerable():
            self.transport.close()
            return
        self.transport.write(refusal(err))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    def busy(self) -> bool:
        """A request is being answered (a graceful stop waits for it)."""
        return self.current is not None and self.current.busy

    def shutdown(self) -> None:
        """Graceful stop: close when idle, else after the response in flight; a stream
        ends now (its app sees the client leave)."""
        cycle = self.current
        if self._wire is not None or cycle is None or not cycle.busy:
            self.transport.close()
            return
        cycle.keep_alive = False
        if cycle.streaming:
            if cycle.chunked:
                self.transport.write(b"0\r\n\r\n")
            cycle.gone()
            self.transport.close()
