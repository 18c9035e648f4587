"""The node's HTTP protocol: uvicorn's httptools protocol with three changes.

1. Each response leaves in one write. uvicorn writes a response's status line and
   headers, then its body, as two ``transport.write`` calls: two ``send`` syscalls
   and usually two TCP segments, so a peer that is itself a node (the entry node of
   a forwarded lookup) wakes up twice to read one reply. A transport proxy holds the
   writes until the response is complete (or, for a streamed body, until the current
   event-loop step ends) and sends them as one buffer.
2. Key lookups that ``LeanLookups`` can answer skip ASGI: no task, no ASGI messages,
   no header re-validation. A local lookup is answered inside the parser callback; one
   forwarded over the lookup wire on a pooled connection is answered from the hop's
   ``data_received`` (one that must connect or wait for a slot, or an HTTP hop, runs in
   a task). Everything else, and
   any lookup the lean path declines, goes through the app as usual.
3. A connection that opens with the peer protocol's preface (``serving/cluster/wire.py``:
   other nodes asking their queries) is served by a ``PeerConnection``
   (``serving/peer/server.py``) instead of HTTP.

Measured with bench/bench_queries.py and ``strace`` (docs/design.md, "Forwarded
lookups"): uvicorn's per-request task and ASGI plumbing cost more CPU than the lookup
itself, and more than nginx spends relaying the same request.

Change 2 overrides uvicorn internals (``_start_asgi_task`` and what ``_respond`` does to
a ``RequestResponseCycle``), so pyproject.toml pins the uvicorn versions this was tested
with, and ``MISSING_HOOKS`` checks for those internals at import. When one is missing,
``node_protocol()`` logs a warning naming it and returns uvicorn's stock protocol: the
node still answers everything (``LeanLookups`` still answers lookups as an ASGI app) and
peers, seeing no lookup wire, fall back to HTTP hops, so only speed is lost, and loudly.
Failing instead would take a whole node down over a performance feature.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable
from time import perf_counter
from typing import Any, cast

import uvicorn
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from streamiq.serving.cluster.wire import PREFACE
from streamiq.serving.http.fastpath import PENDING, Answer, LeanLookups
from streamiq.serving.http.http_limits import LimitedHttpProtocol
from streamiq.serving.http.metrics import served_of
from streamiq.serving.peer.server import PeerConnection

__all__ = ["MISSING_HOOKS", "NodeHttpProtocol", "missing_hooks", "node_protocol"]

log = logging.getLogger("streamiq.node")
_T0 = "streamiq.t0"  # scope key: when the lean path began answering (latency metric)

#: What NodeHttpProtocol uses of uvicorn's httptools protocol beyond its public API.
_PROTOCOL_HOOKS = ("_start_asgi_task", "_unset_keepalive_if_required", "on_message_begin",
                   "on_response_complete", "data_received", "connection_made",
                   "connection_lost")
#: RequestResponseCycle fields ``_respond`` reads or sets (constructor parameters).
_CYCLE_FIELDS = ("default_headers", "message_event", "keep_alive", "on_response")


def missing_hooks(protocol: type = HttpToolsProtocol, cycle: type = RequestResponseCycle,
                  module: object = httptools_impl) -> list[str]:
    """The uvicorn internals the lean path needs that ``protocol`` / ``cycle`` lack."""
    missing = [f"HttpToolsProtocol.{n}" for n in _PROTOCOL_HOOKS if not hasattr(protocol, n)]
    start = getattr(protocol, "_start_asgi_task", None)
    if start is not None and list(inspect.signature(start).parameters) != ["self", "cycle",
                                                                          "app"]:
        missing.append("HttpToolsProtocol._start_asgi_task(cycle, app)")
    fields = inspect.signature(cycle).parameters
    missing += [f"RequestResponseCycle.{n}" for n in _CYCLE_FIELDS if n not in fields]
    if not isinstance(getattr(module, "STATUS_LINE", None), dict):
        missing.append("httptools_impl.STATUS_LINE")
    return missing


#: Checked once, at import: empty when the installed uvicorn has what the lean path needs.
MISSING_HOOKS = missing_hooks()
STATUS_LINE: dict[int, bytes] = getattr(httptools_impl, "STATUS_LINE", {})


class _CoalescingTransport:
    """Transport proxy: writes made within one event-loop step leave as one send."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:  # a streamed body must not wait for the response's end
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def write_now(self, data: bytes) -> None:
        """Send at once (one whole response), after anything still pending."""
        self.flush()
        self._transport.write(data)

    def flush(self) -> None:
        if self._pending:
            data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
            self._pending = []
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()  # what uvicorn wrote before closing still goes out, in order
        self._transport.close()

    def abort(self) -> None:
        self._pending = []
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:  # is_closing, get_extra_info, pause_reading...
        return getattr(self._transport, name)


class NodeHttpProtocol(LimitedHttpProtocol):
    """``uvicorn.run(create_asgi(settings), http=NodeHttpProtocol)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lean = self.app if isinstance(self.app, LeanLookups) else None
        self._head: bytes | None = b""  # a new connection's first bytes, until known
        self._wire: PeerConnection | None = None
        self._defaults: tuple[object, bytes] = (None, b"")  # default headers, rendered
        # the lean path's answers' latency (serving/http/metrics.py); None: metrics off
        self._latency = None if self._lean is None else self._lean.deps.coordinator.traffic.latency

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._raw_transport = transport  # the wire writes whole replies itself
        super().connection_made(_CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        if self._wire is not None:
            self._wire.feed(data)
            if self._wire.authenticated:  # a peer: the read deadline was for strangers
                self._stop_reading()
            return
        if self._head is not None and self._lean is not None:  # a lookup wire, or HTTP?
            data = self._head + data
            if len(data) < len(PREFACE) and PREFACE.startswith(data):
                self._head = data
                return
            self._head = None
            if data.startswith(PREFACE):
                self._wire = PeerConnection(self._lean.peer_server, self._raw_transport,
                                            self.loop, self.timeout_keep_alive)
                self.data_received(data[len(PREFACE):])
                return
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._wire is not None:
            self._wire.close()
        super().connection_lost(exc)

    def _answerable(self) -> bool:  # a stranger stalling on the wire gets no HTTP answer
        return self._wire is None and super()._answerable()

    # Back-pressure on the lookup wire, as uvicorn's flow control does for HTTP: while
    # the replies waiting in the transport are past its high-water mark (the peer is not
    # reading them), no more requests are read, so a peer that pipelines without reading
    # cannot grow the node's memory (it grew 83 -> 622 MB on 60 MB of requests).
    def pause_writing(self) -> None:
        super().pause_writing()
        if self._wire is not None:
            self._raw_transport.pause_reading()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._wire is not None:
            self._raw_transport.resume_reading()

    def on_message_begin(self) -> None:
        # uvicorn cancels the keep-alive timer when bytes arrive; a lean answer can arm
        # it between two pipelined requests of one read, so cancel it here as well
        self._unset_keepalive_if_required()
        super().on_message_begin()

    def on_response_complete(self) -> None:
        self.transport.flush()  # type: ignore[attr-defined]  # the proxy from connection_made
        super().on_response_complete()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        scope = cycle.scope
        if (self._lean is not None and app is self.app and scope["method"] == "GET"
                and not scope["query_string"]):
            cast(Any, scope)[_T0] = perf_counter()
            pending = self._lean.begin(scope["path"], scope["headers"],
                                       lambda answer: self._answered(cycle, answer),
                                       scope["raw_path"])
            if pending is PENDING:  # a hop on a pooled connection: _answered follows
                return
            if isinstance(pending, tuple):
                self._respond(cycle, pending)
                return
            if pending is not None:  # a hop that may have to wait or connect first
                task = self.loop.create_task(self._relay(cycle, cast(Any, pending)))
                task.add_done_callback(self.tasks.discard)
                self.tasks.add(task)
                return
            app = self._lean.app  # declined: the full app answers, without asking again
        super()._start_asgi_task(cycle, app)

    def _answered(self, cycle: RequestResponseCycle, answer: Answer | None) -> None:
        assert self._lean is not None
        if answer is not None:
            self._respond(cycle, answer)
        elif not cycle.disconnected:  # the full route answers (and tries other replicas)
            HttpToolsProtocol._start_asgi_task(self, cycle, cast(Any, self._lean.app))

    async def _relay(self, cycle: RequestResponseCycle,
                     pending: Awaitable[Answer | None]) -> None:
        assert self._lean is not None
        self._answered(cycle, await self._lean.settle(pending))

    def _respond(self, cycle: RequestResponseCycle, answer: Answer) -> None:
        """Write a whole response at once and finish the cycle, as uvicorn's send would."""
        if cycle.disconnected or cycle.response_complete:
            return
        status, body, headers = answer
        if self._latency is not None:
            self._latency.observe(("lookup", served_of("lookup", cycle.scope["headers"], headers)),
                                  perf_counter() - cast(Any, cycle.scope)[_T0])
        src, defaults = self._defaults
        if cycle.default_headers is not src:  # uvicorn sets a new list (date) every second
            defaults = b"".join(b"%s: %s\r\n" % h for h in cycle.default_headers)
            self._defaults = (cycle.default_headers, defaults)
        out = [STATUS_LINE[status], defaults]
        for name, value in headers:
            out += (name, b": ", value, b"\r\n")
        if not cycle.keep_alive:
            out.append(b"connection: close\r\n")
        out += (b"\r\n", body)
        self.transport.write_now(b"".join(out))  # type: ignore[attr-defined]
        cycle.response_started = cycle.response_complete = True
        cycle.message_event.set()
        if not cycle.keep_alive:
            self.transport.close()
        cycle.on_response()


def node_protocol(missing: list[str] = MISSING_HOOKS) -> type[LimitedHttpProtocol]:
    """The ``http=`` a node's uvicorn runs: ``NodeHttpProtocol``, or, when this uvicorn
    lacks a hook it overrides, uvicorn's stock httptools protocol with the size limits
    (``LimitedHttpProtocol``), with a warning. Both keep the size and time limits
    (``serving/http/http_limits.py``; ``with_edge`` sets the read timeout)."""
    if not missing:
        return NodeHttpProtocol
    log.warning("uvicorn %s lacks %s: serving without the lean lookup path and the lookup "
                "wire (slower; peers use HTTP hops). Install a uvicorn version streamiq "
                "pins (pyproject.toml).", uvicorn.__version__, ", ".join(missing))
    return LimitedHttpProtocol
