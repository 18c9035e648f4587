"""A connection's answers without ASGI: a GET a ``LeanGets`` answers (the node's key
lookups, ``fastpath.py``), in one write; and a write (``LeanPosts``: the ingest's)
answered from a callback once its body is read. Both are protocols the server is given
(``server.py``): this module knows neither the node nor the ingest.

``HttpProtocol`` (``protocol.py``) starts each request here: a local lookup is answered
inside the parser callback; one forwarded on a pooled connection from the hop's
``data_received`` (``PENDING``, then ``_lean_answered``); a hop that must connect or wait
for a slot in a task; anything the lean path declines goes to the app as ASGI.

A POST a ``LeanPosts`` takes (``route`` from its head) waits for its body (at most
``LEAN_BODY_BYTES``; past that, or with ``Expect: 100-continue``, the app answers), then
its route is called with the whole body and answers through a callback (the ingest's:
when the broker acknowledged the record), or declines: the app answers it, body and all
(the full route owns every refusal's wording).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from time import perf_counter
from typing import Any, Protocol, cast

from streamiq.serving.http.asgi import STATUS_LINE, ASGIApp, Cycle


class _Shared(Protocol):
    """What the lean path reads of the server's shared state (``protocol.ServerState``)."""

    @property
    def app(self) -> ASGIApp: ...

    @property
    def default_headers(self) -> bytes: ...

__all__ = [
    "LEAN_BODY_BYTES",
    "PENDING",
    "Answer",
    "Later",
    "LeanGets",
    "LeanPosts",
    "LeanServing",
    "Observe",
    "Pending",
    "PostRoute",
]

LEAN_BODY_BYTES = 16384  # a lean write's largest body; a larger one goes to the app
Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]  # status, body, headers
Later = Callable[[Answer | None], None]
#: a lean GET's answer timed: (when it began, perf_counter; the answer)
Observe = Callable[[float, Answer], None]


class Pending:
    """``begin`` sent a hop; the answer goes to the callback it was given."""


PENDING = Pending()


class LeanGets(Protocol):
    """The GETs (without a query string) a server answers without ASGI: the node's key
    lookups (``fastpath.LeanLookups``); ``app`` answers what they decline."""

    @property
    def app(self) -> ASGIApp: ...

    def begin(self, path: str, headers: Any, then: Later | None = None,
              raw_path: bytes | None = None, loop: asyncio.AbstractEventLoop | None = None
              ) -> Answer | Awaitable[Answer | None] | Pending | None:
        """Answer now, later (PENDING: ``then`` gets it; or an awaitable), or None: the
        app answers."""

    async def settle(self, pending: Awaitable[Answer | None]) -> Answer | None:
        """Await what ``begin`` started (None: the app answers)."""

    def timer(self) -> Observe | None:
        """What times each lean answer (None: nothing does)."""

#: A lean write's route, called once its body is read whole: it answers through the
#: callback, now or later (None: the app answers the request instead).
PostRoute = Callable[[Cycle, Callable[[Answer | None], None]], None]


class LeanPosts(Protocol):
    """The writes a server answers without ASGI (the ingest's ``ingest/lean.py``); the
    server's app answers what they decline."""

    def route(self, cycle: Cycle) -> PostRoute | None:
        """The route of a POST from its head alone (None: the app answers it)."""


class LeanServing:
    """The lean path's half of ``HttpProtocol`` (a mixin: the connection's state is the
    protocol's)."""

    state: _Shared
    lean: LeanGets | None
    writes: LeanPosts | None
    posting: tuple[Cycle, PostRoute] | None  # a lean write waiting for its body
    current: Cycle | None
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    _observe: Observe | None

    def _run(self, cycle: Cycle, app: ASGIApp) -> None:
        raise NotImplementedError

    def _track(self, work: Coroutine[Any, Any, None]) -> None:
        raise NotImplementedError

    def _start(self, cycle: Cycle) -> None:
        self.current = cycle
        lean = self.lean
        if lean is None:
            writes = self.writes
            if writes is not None and cycle.method == "POST" and not cycle.continue_:
                route = writes.route(cycle)
                if route is not None:
                    self.posting = (cycle, route)
                    if not cycle.more_body:  # read whole already (it was pipelined)
                        self.posted()
                    return
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


    # --- a lean write (LeanPosts) ---

    def posted(self) -> None:
        """The lean write's body is read whole: its route answers."""
        assert self.posting is not None
        cycle, route = self.posting
        self.posting = None
        route(cycle, partial(self._post_answered, cycle))

    def post_body(self, cycle: Cycle) -> None:
        """More of a lean write's body was read: past ``LEAN_BODY_BYTES`` the app takes
        the request (its ``receive`` gives what was read, then the rest)."""
        if len(cycle.body) > LEAN_BODY_BYTES:
            self.posting = None
            self._run(cycle, self.state.app)

    def _post_answered(self, cycle: Cycle, answer: Answer | None) -> None:
        if answer is not None:
            self._write_answer(cycle, answer)
        elif cycle.busy:
            self._run(cycle, self.state.app)

    def _respond(self, cycle: Cycle, answer: Answer) -> None:
        """A lean lookup's answer, timed."""
        if not cycle.busy:
            return
        if self._observe is not None:
            self._observe(cycle.t0, answer)
        self._write_answer(cycle, answer)

    def _write_answer(self, cycle: Cycle, answer: Answer) -> None:
        """A lean answer: the whole response in one write."""
        if not cycle.busy:
            return
        status, body, headers = answer
        out = [STATUS_LINE[status], self.state.default_headers]
        for name, value in headers:
            out += (name, b": ", value, b"\r\n")
        if not cycle.keep_alive:
            out.append(b"connection: close\r\n")
        out += (b"\r\n", body)
        self.transport.write(b"".join(out))
        cycle.started = True
        cycle.finish()
