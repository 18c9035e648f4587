"""A connection's answers without ASGI: a GET a ``LeanGets`` answers (the node's key
lookups, ``fastpath.py``), in one write; and a write (``LeanPosts``: the ingest's)
answered from a callback once its body is read. Both are protocols the server is given
(``server.py``): this module knows neither the node nor the ingest.

``HttpProtocol`` (``protocol.py``) starts each request here (``LeanServing.start``: one
per server, given the connection it answers on): a local lookup is answered inside the
parser callback; one forwarded on a pooled connection from the hop's
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

    @property
    def lean(self) -> LeanGets | None: ...

    @property
    def writes(self) -> LeanPosts | None: ...

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


class _Conn(Protocol):
    """What the lean path needs of the connection it answers on (``HttpProtocol``)."""

    posting: tuple[Cycle, PostRoute] | None  # a lean write waiting for its body
    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop

    def run(self, cycle: Cycle, app: ASGIApp) -> None:
        """Serve ``cycle`` to ``app`` as ASGI."""

    def track(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as a task the server waits for on a graceful stop."""


class LeanServing:
    """The answers one server gives without ASGI (``ServerState.serving``, one per
    server): each method is given the connection it answers on."""

    def __init__(self, state: _Shared) -> None:
        self.state = state
        self.lean = state.lean
        self.writes = state.writes
        # what times the lean path's answers (the node's latency metric); None: nothing
        self.observe = None if self.lean is None else self.lean.timer()

    def start(self, conn: _Conn, cycle: Cycle) -> None:
        """Answer ``cycle`` (the connection's current request) here, or as ASGI."""
        lean = self.lean
        if lean is None:
            writes = self.writes
            if writes is not None and cycle.method == "POST" and not cycle.continue_:
                route = writes.route(cycle)
                if route is not None:
                    conn.posting = (cycle, route)
                    if not cycle.more_body:  # read whole already (it was pipelined)
                        self.posted(conn)
                    return
            conn.run(cycle, self.state.app)
            return
        if cycle.method == "GET" and not cycle.query:
            cycle.t0 = perf_counter()
            pending = lean.begin(cycle.path, cycle.headers,
                                 partial(self._lean_answered, conn, cycle), cycle.raw_path,
                                 conn.loop)
            if pending is PENDING:  # a hop on a pooled connection: _lean_answered follows
                return
            if isinstance(pending, tuple):
                self.respond(conn, cycle, pending)
                return
            if pending is not None:  # a hop that may have to wait or connect first
                conn.track(self._relay(conn, cycle, cast(Awaitable[Answer | None], pending)))
                return
        conn.run(cycle, lean.app)  # declined: the full app answers, without asking again

    async def _relay(self, conn: _Conn, cycle: Cycle,
                     pending: Awaitable[Answer | None]) -> None:
        assert self.lean is not None
        self._lean_answered(conn, cycle, await self.lean.settle(pending))

    def _lean_answered(self, conn: _Conn, cycle: Cycle, answer: Answer | None) -> None:
        assert self.lean is not None
        if answer is not None:
            self.respond(conn, cycle, answer)
        elif cycle.busy:  # the full route answers (and tries other replicas)
            conn.run(cycle, self.lean.app)

    # --- a lean write (LeanPosts) ---

    def posted(self, conn: _Conn) -> None:
        """The lean write's body is read whole: its route answers."""
        assert conn.posting is not None
        cycle, route = conn.posting
        conn.posting = None
        route(cycle, partial(self._post_answered, conn, cycle))

    def post_body(self, conn: _Conn, cycle: Cycle) -> None:
        """More of a lean write's body was read: past ``LEAN_BODY_BYTES`` the app takes
        the request (its ``receive`` gives what was read, then the rest)."""
        if len(cycle.body) > LEAN_BODY_BYTES:
            conn.posting = None
            conn.run(cycle, self.state.app)

    def _post_answered(self, conn: _Conn, cycle: Cycle, answer: Answer | None) -> None:
        if answer is not None:
            self.write_answer(conn, cycle, answer)
        elif cycle.busy:
            conn.run(cycle, self.state.app)

    def respond(self, conn: _Conn, cycle: Cycle, answer: Answer) -> None:
        """A lean lookup's answer, timed."""
        if not cycle.busy:
            return
        if self.observe is not None:
            self.observe(cycle.t0, answer)
        self.write_answer(conn, cycle, answer)

    def write_answer(self, conn: _Conn, cycle: Cycle, answer: Answer) -> None:
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
        conn.transport.write(b"".join(out))
        cycle.started = True
        cycle.finish()
