"""A connection's answers on the lean path (``fastpath.py``): a key lookup answered
without ASGI, in one write.

``HttpProtocol`` (``protocol.py``) starts each request here: a local lookup is answered
inside the parser callback; one forwarded on a pooled connection from the hop's
``data_received`` (``PENDING``, then ``_lean_answered``); a hop that must connect or wait
for a slot in a task; anything the lean path declines goes to the app as ASGI.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol, cast

from streamiq.serving.http.asgi import STATUS_LINE, ASGIApp, Cycle
from streamiq.serving.http.fastpath import PENDING, Answer, LeanLookups
from streamiq.serving.http.metrics import served_of

if TYPE_CHECKING:
    from streamiq.metrics import Latency


class _Shared(Protocol):
    """What the lean path reads of the server's shared state (``protocol.ServerState``)."""

    @property
    def app(self) -> ASGIApp: ...

    @property
    def default_headers(self) -> bytes: ...

__all__ = ["LeanServing"]


class LeanServing:
    """The lean path's half of ``HttpProtocol`` (a mixin: the connection's state is the
    protocol's)."""

    state: _Shared
    lean: LeanLookups | None
    current: Cycle | None
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    _latency: Latency | None

    def _run(self, cycle: Cycle, app: ASGIApp) -> None:
        raise NotImplementedError

    def _track(self, work: Coroutine[Any, Any, None]) -> None:
        raise NotImplementedError

    def _start(self, cycle: Cycle) -> None:
        self.current = cycle
        lean = self.lean
        if lean is None:
            self._run(cycle, self.state.app)
            return
        if cycle.method == "GET" and not cycle.query:
            cycle.t0 = perf_counter()
            pending = lean.begin(cycle.path, cycle.headers,
                                 partial(self._lean_answered, cycle), cycle.raw_path, self.loop)
            if pending is PENDING:  # a hop on a pooled connection: _lean_answered follows
                return
            if isinstance(pending, tuple):
                self._respond(cycle, pending)
                return
            if pending is not None:  # a hop that may have to wait or connect first
                self._track(self._relay(cycle, cast(Awaitable[Answer | None], pending)))
                return
        self._run(cycle, lean.app)  # declined: the full app answers, without asking again


    async def _relay(self, cycle: Cycle, pending: Awaitable[Answer | None]) -> None:
        assert self.lean is not None
        self._lean_answered(cycle, await self.lean.settle(pending))


    def _lean_answered(self, cycle: Cycle, answer: Answer | None) -> None:
        assert self.lean is not None
        if answer is not None:
            self._respond(cycle, answer)
        elif cycle.busy:  # the full route answers (and tries other replicas)
            self._run(cycle, self.lean.app)


    def _respond(self, cycle: Cycle, answer: Answer) -> None:
        """A lean answer: the whole response in one write."""
        if not cycle.busy:
            return
        status, body, headers = answer
        if self._latency is not None:
            self._latency.observe(("lookup", served_of("lookup", cycle.headers, headers)),
                                  perf_counter() - cycle.t0)
        out = [STATUS_LINE[status], self.state.default_headers]
        for name, value in headers:
            out += (name, b": ", value, b"\r\n")
        if not cycle.keep_alive:
            out.append(b"connection: close\r\n")
        out += (b"\r\n", body)
        self.transport.write(b"".join(out))
        cycle.started = True
        cycle.finish()
