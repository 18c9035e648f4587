"""How a node answers over HTTP: a request parsed into a typed query, the query layer's
answer rendered as JSON.

``Answers`` holds the query layer (``serving/query/``: ``Queries``, built in the
composition root, ``serving/main.py``) and adds what only HTTP needs: the caller of a
request (its Authorization and budget), and the responses of a one-partition answer
(here, a replica's reply relayed, a 307, a refusal) and of a scatter-gather. The HTTP
routes (``serving/http/app.py``, ``serving/http/queries.py``) and the lean path
(``serving/http/fastpath.py``) answer through it. Every HTTP request is a client's:
peers ask over the peer protocol (``serving/peer/server.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote

from fastapi import Request, Response
from fastapi.responses import JSONResponse, RedirectResponse

from streamiq._fastapi import error_response
from streamiq.auth import Principal
from streamiq.errors import PROBLEM_JSON, BadRequest
from streamiq.serving.engines.partials import P
from streamiq.serving.query.answers import One, Redirect, Refuse, Relayed
from streamiq.serving.query.model import Caller, Gathered, Lookup, PeerPart, Read
from streamiq.serving.query.run import Queries
from streamiq.serving.routes import view_of

__all__ = ["HOPS", "SERVED_BY", "TIMEOUT", "Answers", "budget_s", "raw_path"]

R = TypeVar("R")
T = TypeVar("T")
#: the client's budget for a request, in milliseconds (else ``reads.BUDGET_S``)
TIMEOUT = "x-streamiq-timeout-ms"
#: an answer's hops (0: answered here; 1: by a replica) and the node that answered it
HOPS = "x-streamiq-hops"
SERVED_BY = "x-streamiq-served-by"
_MAX_TIMEOUT_MS = 3_600_000


def budget_s(raw: str | None) -> float | None:
    """The seconds a ``X-Streamiq-Timeout-Ms`` value gives (None: none given); a 400
    naming the header when it is not a number of milliseconds up to an hour."""
    if raw is None:
        return None
    if not raw.isdigit() or not 0 < int(raw) <= _MAX_TIMEOUT_MS:
        raise BadRequest(f"{TIMEOUT}: expected milliseconds in 1..{_MAX_TIMEOUT_MS}, got "
                         f"{raw[:40]!r}", field=TIMEOUT)
    return int(raw) / 1000


def raw_path(request: Request) -> str:
    """The path as the client wrote it, percent-encoding and all (a key may hold
    ``%2F``: ``serving/http/paths.py``), for a redirect to a replica."""
    raw = request.scope.get("raw_path")
    return raw.decode("latin-1") if raw else quote(request.url.path)


class Answers:
    """The query layer's answers rendered for HTTP requests."""

    def __init__(self, queries: Queries) -> None:
        self.queries = queries
        self.node = queries.node
        self.coordinator = queries.coordinator

    def who(self, request: Request) -> Principal:
        """The caller (its token was checked before the route ran; cached)."""
        return self.coordinator.gate.auth.principal(request.headers.get("authorization"))

    def check(self, request: Request) -> None:
        """Authenticate a request before its route runs (``Gate.check``), for the view its
        route reads; raises ``Unauthenticated`` or ``Forbidden``."""
        route = request.scope.get("route")
        view = view_of(getattr(route, "path", None), request.path_params)
        self.coordinator.gate.check(request.headers.get("authorization"), view)

    @staticmethod
    def caller(request: Request) -> Caller:
        """Who asks: the client's Authorization and budget."""
        budget = budget_s(request.headers.get(TIMEOUT))
        return Caller(request.headers.get("authorization"), deadline=None if budget is None
                      else asyncio.get_running_loop().time() + budget)

    async def lookup_response(self, request: Request, q: Lookup) -> Response:
        """A key lookup's full route: 200 and the row, or 404 and its problem document."""
        caller = self.caller(request)

        def here(read: Read) -> Response:
            return Response(read.body, read.status, headers={SERVED_BY: self.node.endpoint},
                            media_type="application/json" if read.status == 200
                            else PROBLEM_JSON)

        return self.one(request, await self.queries.lookup(q, caller), here)

    def one(self, request: Request, answer: T | One,
            here: Callable[[T], Response]) -> Response:
        """The response of a one-partition answer: ``here``'s rendering of this node's
        answer, a replica's reply relayed (hops 1), a 307 or the refusal."""
        if isinstance(answer, Relayed):
            status, body = answer.reply
            return Response(body, status, headers={HOPS: "1", SERVED_BY: answer.address},
                            media_type="application/json" if status == 200 else PROBLEM_JSON)
        if isinstance(answer, Redirect):
            target = f"{self.coordinator.peers.scheme}://{answer.address}{raw_path(request)}"
            if request.url.query:
                target += "?" + request.url.query
            return RedirectResponse(target, status_code=307)
        if isinstance(answer, Refuse):
            return error_response(answer.error)
        resp = here(answer)
        resp.headers[HOPS] = str(getattr(answer, "hops", 0))
        return resp

    @staticmethod
    def gathered(answer: Gathered[R] | PeerPart[P], body: Callable[[R], dict[str, Any]]
                 ) -> Response:
        """A scatter-gather's response: its status, ``body`` (the result as JSON) and
        the partitions asked and missing."""
        if isinstance(answer, PeerPart):  # only for a peer's Caller, which HTTP never makes
            raise TypeError("a peer's part is answered over the peer protocol")
        doc = {"status": answer.status, "view": answer.view, **body(answer.result),
               "partitions": answer.partitions, "missing_partitions": answer.missing,
               "served_by": answer.served_by}
        if answer.cut is not None:
            doc["cut"] = answer.cut
        return JSONResponse(doc, headers={HOPS: str(answer.hops), SERVED_BY: answer.served_by})
