"""A lean path for the hottest query: a key lookup, answered or forwarded in one hop.

A ``GET /v1/views/{view}/keys/{key}`` (or the seed's ``GET /account/{id}``, the
``balances`` view's shortcut) without query parameters is answered straight
from the store, before FastAPI routing and parameter validation, with the exact body
and headers of the regular route. Where it is answered is decided once, by
``Answers.decide`` (``serving/cluster/placement.py`` plus one store read), the decision the
full route and the lookup wire make too; this module only carries it out:

* answered here (a forwarded lookup from a peer, ``X-Streamiq-Forwarded`` with the
  cluster credential, for a partition held here; or this node is the partition's
  active owner within the default ``--max-lag``): the row (200) or the problem
  document (404), hops 0, from one store read;
* forwarded: one call to the preferred replica (hops 1), its 200 or 404 relayed; a
  refused connection, 421 or 503 defers to the regular route, which tries the next
  replica and marks the dead one. The call goes over the lookup wire
  (``serving/cluster/wire.py``; the owner answers it in ``wire_lookup``), or over HTTP when the
  owner does not speak the wire;
* refused: 421 to a peer for a partition not held here, 503 when no replica can answer.

The client's token is checked first (``streamiq/auth.py``; a request it does not allow
falls through to the full app, which answers 401 or 403), and again by the owner.

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

import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from time import perf_counter
from typing import Any
from urllib.parse import quote

from streamiq.errors import PROBLEM_JSON, BadRequest, PeerError, StreamiqError
from streamiq.serving.cluster.coordinator import (
    FORWARDED,
    HOPS,
    SERVED_BY,
    relayed_headers,
)
from streamiq.serving.cluster.hop import HopReply
from streamiq.serving.cluster.placement import Forward, Refuse
from streamiq.serving.cluster.wire import request_frame
from streamiq.serving.http.answers import Answers
from streamiq.serving.http.metrics import served_of
from streamiq.serving.http.paths import not_utf8, segments
from streamiq.serving.query.model import Read
from streamiq.serving.routes import lookup_target
from streamiq.views.base import View

__all__ = ["PENDING", "Answer", "Later", "LeanLookups"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]],
                    Callable[[Message], Awaitable[None]]], Awaitable[None]]

log = logging.getLogger("streamiq.routing")

_FWD = FORWARDED.encode()
_AUTH = b"authorization"
_HOPS = HOPS.encode()
_SERVED_BY = SERVED_BY.encode()
_JSON, _PROBLEM = b"application/json", PROBLEM_JSON.encode()  # an answer, an error (404)
Answer = tuple[int, bytes, list[tuple[bytes, bytes]]]  # status, body, headers
Later = Callable[[Answer | None], None]


class _Pending:
    """``begin`` sent a hop; the answer goes to the callback it was given."""


PENDING = _Pending()


class LeanLookups:
    """ASGI wrapper around the node's FastAPI app: ``LeanLookups(app, deps=deps)``."""

    def __init__(self, app: ASGIApp, deps: Answers) -> None:
        self.app = app
        self.deps = deps
        # bound once: the same call cost as the methods these were before
        self._decide = deps.decide
        self._endpoint = deps.node.endpoint.encode()

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Message]],
                       send: Callable[[Message], Awaitable[None]]) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]:
            t0 = perf_counter()
            answer = await self.answer(scope["path"], scope["headers"], scope.get("raw_path"))
            if answer is not None:
                status, body, headers = answer
                latency = self.deps.coordinator.traffic.latency
                if latency is not None:
                    served = served_of("lookup", scope["headers"], headers)
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
        assert not isinstance(pending, _Pending)  # only for a caller that gave a callback
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
              then: Later | None = None, raw_path: bytes | None = None
              ) -> Answer | Awaitable[Answer | None] | _Pending | None:
        """Answer now (a local lookup), later (the forwarded hop: PENDING when ``then``
        will get the answer, else a coroutine), or None: the full app answers.

        Never raises: if the lean path itself fails, the full app answers instead
        (no bare 500s from here).
        """
        try:
            return self._begin(path, headers, then, raw_path)
        except Exception:
            log.exception("lean lookup path failed; answering through the full app")
            return None

    def _begin(self, path: str, headers: Iterable[tuple[bytes, bytes]], then: Later | None,
               raw_path: bytes | None) -> Answer | Awaitable[Answer | None] | _Pending | None:
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
        view, key = target
        node = self.deps.node
        p = view.partition_of(key, node.partitions[view.name])
        co = self.deps.coordinator
        fwd = auth = None
        for k, v in headers:
            if k == _FWD:
                fwd = v
            elif k == _AUTH:
                auth = v
        if not co.gate.auth.allows(auth, view.name):
            return None  # the full app answers 401 or 403
        if fwd is not None and not co.gate.is_mark(fwd):
            return None  # the full app answers 401
        max_lag = node.settings.max_lag
        d = self._decide(view, key, p, fwd is not None, max_lag)
        if type(d) is Read:
            return self.local(d)
        if type(d) is Forward:
            if raw_path is None or b" " in raw_path or b"\n" in raw_path:
                raw_path = quote(path).encode()
            return self.forward(raw_path, view, p, max_lag, auth, then, d.address)
        if type(d) is Refuse:
            return self.refused(d.error, fwd is not None)
        return None  # redirect mode: the full route answers 307

    def _target(self, parts: list[str], check_key: bool = True) -> tuple[View, str] | None:
        """(view, key) of a lean-able lookup path (``routes.lookup_target``), given as its
        decoded segments; None for anything else."""
        target = lookup_target(parts)
        if target is None:
            return None
        view = self.deps.node.views.get(target[0])
        key = target[1]
        if view is None or view.windowed:
            return None
        if check_key:
            try:
                view.parse_key(key)
            except ValueError:
                return None
        return view, key

    def local(self, read: Read) -> Answer:
        """This node's answer: the row (200) or the problem document (404), as read."""
        status, body = read
        return status, body, [(b"content-type", _JSON if status == 200 else _PROBLEM),
                              (b"content-length", str(len(body)).encode()),
                              (_SERVED_BY, self._endpoint), (_HOPS, b"0")]

    @staticmethod
    def refused(error: StreamiqError, forwarded: bool) -> Answer:
        """The answer of a lookup nobody can answer (421 to a peer, 503), as the full
        route gives it."""
        body = error.render()
        headers = [(b"content-length", str(len(body)).encode()), (b"content-type", _PROBLEM)]
        return error.http_status, body, [*headers, (_HOPS, b"0")] if forwarded else headers

    def wire_lookup(self, p: int, partitions: int, raw_path: bytes, token: bytes
                    ) -> tuple[int, bytes]:
        """The owner's answer to a lookup that came over the wire (``serving/cluster/wire.py``):
        status and body as the regular route would give them to a forwarded request.
        Raises ``BadRequest`` / ``NotActive`` / ``Unauthenticated`` / ``Forbidden``, or
        ``StreamiqError`` (500) if placement broke its rule; ``wire.answer`` maps them."""
        try:
            parts = segments(raw_path)
        except UnicodeDecodeError:
            raise not_utf8(raw_path) from None
        # the entry checked the key's form; a malformed one is in no store: a plain 404
        target = self._target(parts, check_key=False)
        if target is None:
            raise BadRequest(f"not a key lookup of a keyed view: "
                             f"{raw_path.decode('latin-1')!r}")
        view, key = target
        node = self.deps.node
        auth = self.deps.coordinator.gate.auth
        if auth.enabled:
            auth.reader(b"Bearer " + token, view.name)
        if partitions != node.partitions[view.name]:
            raise self.deps.not_held(view.name, p)
        d = self._decide(view, key, p, True, node.settings.max_lag)
        if type(d) is Refuse:
            raise d.error
        if type(d) is not Read:  # placement answers a peer's request here or refuses it
            raise StreamiqError(f"a forwarded lookup of {view.name} partition {p} was "
                                f"placed as {type(d).__name__}: a peer's lookup is answered "
                                "here or refused", partition=p)
        return d

    def forward(self, raw_path: bytes, view: View, p: int, max_lag: int,
                auth: bytes | None, then: Later | None, owner: str
                ) -> Awaitable[Answer | None] | _Pending:
        """One hop to ``owner``, the replica ``decide`` chose; any trouble (a
        ``PeerError``, a 421 or 503) defers to the regular route.

        Over the lookup wire (``serving/cluster/wire.py``; the client's token goes in the frame),
        or the one HTTP hop when the owner does not speak the wire
        (``Peers.forward_lookup``; the token as the Authorization header). With
        ``then`` and an idle pooled wire connection, the hop runs on callbacks and
        ``then(answer)`` gets its outcome (PENDING is returned); otherwise a coroutine
        that may wait for a slot or connect first.
        """
        hop = self.deps.coordinator.peers.hop
        token = b"-" if auth is None else auth[7:].strip()  # the client's, checked again
        frame = (request_frame(p, self.deps.node.partitions[view.name], raw_path, token)
                 if hop.speaks_wire(owner) else None)
        if then is not None and frame is not None:
            def relayed(reply: HopReply | None) -> None:
                try:
                    answer = self._relayed(reply, owner, view, p, max_lag)
                except Exception:
                    log.exception("lean lookup path failed; answering through the full app")
                    answer = None
                then(answer)

            if hop.lookup(owner, frame, relayed):
                return PENDING
        return self._forward(owner, frame, raw_path, auth, view, p, max_lag)

    async def _forward(self, owner: str, frame: bytes | None, raw_path: bytes,
                       auth: bytes | None, view: View, p: int, max_lag: int) -> Answer | None:
        try:
            reply = await self.deps.coordinator.peers.forward_lookup(owner, frame, raw_path, auth)
        except PeerError:
            reply = None  # the regular route tries the next replica (and suspects this one)
        return self._relayed(reply, owner, view, p, max_lag)

    def _relayed(self, reply: HopReply | None, owner: str, view: View, p: int,
                 max_lag: int) -> Answer | None:
        """The owner's reply as this node's answer; None lets the regular route retry
        the next replica (and mark this one, when it could not be reached)."""
        if reply is None or reply.status not in (200, 404):  # unreachable, 421 or 503:
            self.deps.coordinator.placement.forget(view.name, p, max_lag)  # choose again next time
            return None
        self.deps.coordinator.traffic.forwarded_to(owner)
        hdrs = (relayed_headers(reply.headers, b"x-streamiq-", _HOPS)
                if reply.headers else [(_SERVED_BY, owner.encode())])  # a wire reply
        return reply.status, reply.body, [
            (b"content-type", _JSON if reply.status == 200 else _PROBLEM),
            (b"content-length", str(len(reply.body)).encode()), *hdrs, (_HOPS, b"1")]

