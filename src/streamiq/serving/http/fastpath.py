"""A lean path for the hottest query: a key lookup, answered or forwarded in one hop.

A ``GET /v1/views/{view}/keys/{key}`` (or the seed's ``GET /account/{id}``, the
``balances`` view's shortcut) without query parameters is answered straight
from the store, before FastAPI routing and parameter validation, with the exact body
and headers of the regular route. Where it is answered is decided once, by
``Reads.decide`` (``serving/cluster/placement.py`` plus one store read), the decision the
full route and the peer server make too; this module only carries it out:

* answered here (this node is the partition's active owner within the default
  ``--max-lag``): the row (200) or the problem document (404), hops 0, from one store
  read;
* forwarded: the query layer's one hedged call to the preferred replica
  (``Queries.forward``, ``serving/cluster/race.py``: on an idle pooled connection, on
  callbacks; a slow replica hedged to the next; a 421 or an unreachable one, the other
  replicas walked), its 200 or 404 relayed (hops 1);
* refused: 503 when no replica can answer.

A peer's lookup never comes here: peers ask over the peer protocol
(``serving/peer/server.py``).

The client's token is checked first (``streamiq/auth.py``; a request it does not allow
falls through to the full app, which answers 401 or 403), and again by the owner. The
client's budget (``X-Streamiq-Timeout-Ms``, else ``BUDGET_S``) travels with the hop.

Anything else (unknown view, malformed key, windowed view, redirect mode, ``max_lag`` /
``position`` / ``wait_ms`` parameters, a path that is not UTF-8 once percent-decoded)
falls through to the regular FastAPI route, which owns those answers. A path with a
``%`` is taken apart from the raw path (``serving/http/paths.py``), so a key holding ``/``
(``%2F``) is looked up as it is.

Two ways in: ``LeanLookups`` is an ASGI app wrapping the FastAPI app, and the node's
HTTP protocol (``serving/http/protocol.py``) calls ``begin`` straight from the HTTP parser,
passing a callback that gets the answer of a hop sent on a pooled connection.

Why: measured with bench/bench_queries.py, FastAPI's routing, parameter validation and
JSONResponse were most of a node's CPU per lookup; the answer itself is a RocksDB get.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from time import perf_counter
from typing import TYPE_CHECKING, Any

from streamiq._http import problem
from streamiq.errors import PROBLEM_JSON, StreamiqError
from streamiq.kafka.partitioner import partition_for
from streamiq.serving.http.answers import HOPS, SERVED_BY, TIMEOUT, Answers, budget_s
from streamiq.serving.http.leanserve import PENDING, Answer, Later, Observe, Pending
from streamiq.serving.http.metrics import served_of
from streamiq.serving.http.paths import segments
from streamiq.serving.query.answers import Forward, PeerReply, Redirect, Refuse, Relayed
from streamiq.serving.query.model import Read
from streamiq.serving.query.reads import BUDGET_S
from streamiq.serving.routes import lookup_target
from streamiq.views.base import View

if TYPE_CHECKING:  # built in the composition root (serving/main.py), only carried here
    from streamiq.serving.http.protocol import SamePort

__all__ = ["LeanLookups"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]],
                    Callable[[Message], Awaitable[None]]], Awaitable[None]]

log = logging.getLogger("streamiq.routing")

_AUTH = b"authorization"
_TIMEOUT = TIMEOUT.encode()
_HOPS = HOPS.encode()
_SERVED_BY = SERVED_BY.encode()
_JSON, _PROBLEM = b"application/json", PROBLEM_JSON.encode()  # an answer, an error (404)
_TYPE_JSON, _TYPE_PROBLEM = (b"content-type", _JSON), (b"content-type", _PROBLEM)
_NO_HOP, _ONE_HOP = (_HOPS, b"0"), (_HOPS, b"1")
_LOCAL, _FORWARDED = ("lookup", "local"), ("lookup", "forwarded")  # the latency's labels


def _settle(got: asyncio.Future[Answer | None], answer: Answer | None) -> None:
    """An ASGI call's answer, unless its request went away meanwhile (the future was
    cancelled: nothing waits for it)."""
    if not got.done():
        got.set_result(answer)


class LeanLookups:
    """ASGI wrapper around the node's FastAPI app: ``LeanLookups(app, deps, peer_server)``
    (the peer protocol's server, answering on the same port: ``serving/http/protocol.py``;
    all three built in ``serving/main.py``). The HTTP server's ``LeanGets``."""

    def __init__(self, app: ASGIApp, deps: Answers, peer_server: SamePort) -> None:
        self.app = app
        self.deps = deps
        self.peer_server = peer_server
        # bound once: the same call cost as the methods these were before
        self._decide = deps.queries.decide
        self._forward = deps.queries.forward
        self._endpoint = deps.node.endpoint.encode()
        self._served: dict[str, tuple[bytes, bytes]] = {}  # a peer's served-by header

    def timer(self) -> Observe | None:
        """Each lean answer's latency, by how it was served (None: metrics off)."""
        latency = self.deps.coordinator.traffic.latency
        if latency is None:
            return None

        def observe(t0: float, answer: Answer) -> None:
            # this path's answers end with their hops header (a refusal has none: local)
            headers = answer[2]
            served = _FORWARDED if headers and headers[-1] is _ONE_HOP else _LOCAL
            latency.observe(served, perf_counter() - t0)
        return observe

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]:
            t0 = perf_counter()
            answer = await self.answer(scope["path"], scope["headers"], scope.get("raw_path"))
            if answer is not None:
                status, body, headers = answer
                latency = self.deps.coordinator.traffic.latency
                if latency is not None:
                    served = served_of("lookup", headers)
                    latency.observe(("lookup", served), perf_counter() - t0)
                await send({"type": "http.response.start", "status": status,
                            "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    async def answer(self, path: str, headers: Iterable[tuple[bytes, bytes]],
                     raw_path: bytes | None = None) -> Answer | None:
        """The lean answer, or None when the full app must answer."""
        pending = self.begin(path, headers, raw_path=raw_path)
        if pending is None or isinstance(pending, tuple):
            return pending
        assert not isinstance(pending, Pending)  # only for a caller that gave a callback
        return await self.settle(pending)

    @staticmethod
    async def settle(pending: Awaitable[Answer | None]) -> Answer | None:
        """Await what ``begin`` started; a failure means the full app answers."""
        try:
            return await pending
        except Exception:
            log.exception("lean lookup path failed; answering through the full app")
            return None

    def begin(self, path: str, headers: Iterable[tuple[bytes, bytes]],
              then: Later | None = None, raw_path: bytes | None = None,
              loop: asyncio.AbstractEventLoop | None = None
              ) -> Answer | Awaitable[Answer | None] | Pending | None:
        """Answer now (a local lookup), later (the forwarded hop: PENDING when ``then``
        will get the answer, else a coroutine), or None: the full app answers.

        Never raises: if the lean path itself fails, the full app answers instead
        (no bare 500s from here). ``loop``: the running one, when the caller has it at
        hand (``asyncio.get_running_loop`` asks the OS for the process id each time).
        """
        try:
            return self._begin(path, headers, then, raw_path, loop)
        except Exception:
            log.exception("lean lookup path failed; answering through the full app")
            return None

    def _begin(self, path: str, headers: Iterable[tuple[bytes, bytes]], then: Later | None,
               raw_path: bytes | None, loop: asyncio.AbstractEventLoop | None
               ) -> Answer | Awaitable[Answer | None] | Pending | None:
        if raw_path is not None and b"%" in raw_path:
            try:
                parts = segments(raw_path)
            except UnicodeDecodeError:
                return None  # the full app answers 400
        else:
            parts = path.split("/")
        target = self._target(parts)
        if target is None:
            return None
        view, key, raw = target
        node = self.deps.node
        p = partition_for(raw, node.partitions[view.name])
        co = self.deps.coordinator
        auth = timeout = None
        for k, v in headers:
            if k == _AUTH:
                auth = v
            elif k == _TIMEOUT:
                timeout = v
        if not co.gate.auth.allows(auth, view.name):
            return None  # the full app answers 401 or 403
        max_lag = node.settings.max_lag
        d = self._decide(view, key, p, max_lag)
        if type(d) is Read:
            return self.local(d)
        if type(d) is Forward:
            budget = None if timeout is None else budget_s(timeout.decode("latin-1"))
            return self.forward(view, key, p, max_lag, auth, then, d.address, budget,
                                loop or asyncio.get_running_loop())
        if type(d) is Refuse:
            co.traffic.refused(d.error.http_status)
            return self.refused(d.error)
        return None  # redirect mode: the full route answers 307

    def _target(self, parts: list[str]) -> tuple[View, str, bytes] | None:
        """(view, key, the key's bytes) of a lean-able lookup path
        (``routes.lookup_target``), given as its decoded segments; None for anything else
        (a malformed key too: the full route names the problem)."""
        target = lookup_target(parts)
        if target is None:
            return None
        view = self.deps.node.views.get(target[0])
        key = target[1]
        if view is None or view.window is not None:
            return None
        try:
            return view, key, view.checked_key(key)
        except ValueError:
            return None

    def local(self, read: Read) -> Answer:
        """This node's answer: the row (200) or the problem document (404), as read."""
        status, body = read
        return status, body, [_TYPE_JSON if status == 200 else _TYPE_PROBLEM,
                              (b"content-length", b"%d" % len(body)),
                              (_SERVED_BY, self._endpoint), _NO_HOP]

    @staticmethod
    def refused(error: StreamiqError) -> Answer:
        """The answer of a lookup nobody can answer (503), as the full route gives it."""
        return problem(error)  # the HTTP answer of an error (_http.py)

    def forward(self, view: View, key: str, p: int, max_lag: int, auth: bytes | None,
                then: Later | None, owner: str, budget: float | None,
                loop: asyncio.AbstractEventLoop) -> Awaitable[Answer | None] | Pending:
        """The lookup sent to ``owner``, the replica ``decide`` chose, by the query
        layer's one hedged call (``Queries.forward``: the client's Authorization in the
        request, checked again by the owner; a slow owner hedged; when it cannot answer,
        the other replicas). ``then`` gets the rendered answer (PENDING is returned);
        without it, a future does."""
        authorization = None if auth is None else auth.decode("latin-1")
        deadline = loop.time() + (budget if budget is not None else BUDGET_S)
        got: asyncio.Future[Answer | None] | None = None
        if then is None:
            got = loop.create_future()
            then = functools.partial(_settle, got)

        def answered(answer: Any, exc: BaseException | None) -> None:
            if type(answer) is Relayed:  # the usual
                then(self.relayed(answer.reply, answer.address))
            elif exc is not None:  # the full app answers (and names a query's error)
                if not isinstance(exc, StreamiqError | asyncio.CancelledError):
                    log.error("lean lookup failed; answering through the full app",
                              exc_info=exc)
                then(None)
            else:
                then(self.rendered(answer))

        self._forward(view, key, p, max_lag, owner, authorization, deadline, answered, loop)
        return PENDING if got is None else got

    def rendered(self, got: Read | Relayed | Redirect | Refuse) -> Answer | None:
        if type(got) is Read:
            return self.local(got)
        if type(got) is Relayed:
            return self.relayed(got.reply, got.address)
        if type(got) is Refuse:
            return self.refused(got.error)
        return None

    def relayed(self, reply: PeerReply, owner: str) -> Answer:
        """The owner's reply as this node's answer (hops 1)."""
        status, body = reply
        served = self._served.get(owner)
        if served is None:
            served = self._served[owner] = (_SERVED_BY, owner.encode())
        return status, body, [_TYPE_JSON if status == 200 else _TYPE_PROBLEM,
                              (b"content-length", b"%d" % len(body)), served, _ONE_HOP]

