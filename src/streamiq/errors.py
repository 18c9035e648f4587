"""What can go wrong answering a request, as one typed hierarchy.

Modelled on faust's ``web/exceptions.py`` and httpx's ``_exceptions.py``: each class
carries its HTTP status and a stable machine-readable code, is raised where the problem
is found, and is turned into an answer in one place per front end: ``streamiq._http``
for HTTP, ``streamiq._sqlstate`` for SQL, and for the peer protocol the same problem
document as HTTP's (``render``), read back into its class by ``from_problem``. The body
is an RFC 9457 problem document (``application/problem+json``)::

    {"type": "urn:streamiq:problem:not-active", "title": "Not Active", "status": 421,
     "code": "NOT_ACTIVE", "detail": "<message>", ...extra members}

``status`` is the HTTP status (a number, as RFC 9457 defines it), ``code`` the stable
machine-readable code clients match on (never the ``detail``), ``type`` a URN made from
it. Successful answers keep their own ``{"status": "OK" | "PARTIAL", ...}`` shape.

    StreamiqError                 500 INTERNAL
    ├── BadRequest                400 BAD_REQUEST
    │   ├── BadSql                400 BAD_SQL      (SQL that does not parse or plan)
    │   └── TooManyRows           400 TOO_MANY_ROWS (a SQL result or gather past its bound)
    ├── Unauthenticated           401 UNAUTHENTICATED (no valid token or cluster credential)
    ├── Forbidden                 403 FORBIDDEN    (the token may not read that view)
    ├── NotFound                  404 NOT_FOUND
    │   └── UnknownView           404 UNKNOWN_VIEW
    ├── NotActive                 421 NOT_ACTIVE   (this node does not hold the partition)
    ├── Canceled                  499 CANCELED     (the client canceled its query: SQL)
    ├── TooManySubscriptions      429 TOO_MANY_SUBSCRIPTIONS (live subscriptions past a limit)
    ├── Unavailable               503 UNAVAILABLE  (no replica can answer)
    │   └── NotUpToBound          503 NOT_UP_TO_BOUND (position not reflected in time)
    ├── DeadlineExceeded          504 DEADLINE_EXCEEDED (no answer within the budget)
    └── PeerError                 502 PEER_ERROR   (another node, at the transport level)
        ├── PeerUnreachable       the peer is gone (refused, reset): a suspect
        └── PeerTimeout           the peer is slow: retried elsewhere, not blamed

``PeerError`` is what the node-to-node client raises for any transport failure
(``serving/cluster/coordinator.py`` maps the client library's exceptions once, at the edge);
it is handled by trying the next replica and never reaches a client as such.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["PROBLEM_JSON", "BadRequest", "BadSql", "Canceled", "CutMoved", "DeadlineExceeded",
           "Forbidden", "NoCursor",
           "NotActive", "NotFound", "NotUpToBound", "Overloaded", "PayloadTooLarge", "PeerError",
           "PeerTimeout", "PeerUnreachable", "RequestHeaderTooLarge", "RequestTimeout",
           "StreamiqError", "TooComplex", "TooManyRows", "TooManySubscriptions",
           "Unauthenticated", "Unavailable", "UnknownView", "from_problem"]

_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # as JSONResponse renders
PROBLEM_JSON = "application/problem+json"  # RFC 9457's media type


class StreamiqError(Exception):
    """Base class: an HTTP status, a stable code, a message and extra body fields."""

    http_status: int = 500  # per class; an instance may set its own (_http.ApiError)
    code: str = "INTERNAL"

    def __init__(self, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra

    def body(self) -> dict[str, Any]:
        """The RFC 9457 problem document (the shape every streamiq error answer has)."""
        return {"type": "urn:streamiq:problem:" + self.code.lower().replace("_", "-"),
                "title": self.code.replace("_", " ").title(), "status": self.http_status,
                "code": self.code, "detail": self.message, **self.extra}

    def render(self) -> bytes:
        """``body()`` as the bytes an HTTP answer or a peer's reply carries."""
        return _JSON.encode(self.body()).encode()


class BadRequest(StreamiqError):
    http_status = 400
    code = "BAD_REQUEST"


class BadSql(BadRequest):
    """SQL that does not parse, or that names a column or function the view lacks."""

    code = "BAD_SQL"


class TooComplex(BadSql):
    """A statement nested deeper than the planner's bound (PostgreSQL's 54001)."""

    code = "TOO_COMPLEX"


class NoCursor(BadRequest):
    """A FETCH, MOVE or CLOSE of a cursor the session has not declared (or closed)."""

    code = "NO_CURSOR"


class TooManyRows(BadRequest):
    """A SQL query would gather or return more rows than the node's bound."""

    code = "TOO_MANY_ROWS"


class Canceled(StreamiqError):
    """The client canceled its running query (a PostgreSQL cancel request)."""

    http_status = 499
    code = "CANCELED"


class Unauthenticated(StreamiqError):
    """No valid client token, or a forwarded request without the cluster credential."""

    http_status = 401
    code = "UNAUTHENTICATED"


class Forbidden(StreamiqError):
    """A valid token that may not do this (e.g. read that view)."""

    http_status = 403
    code = "FORBIDDEN"


class PayloadTooLarge(StreamiqError):
    """The request's body is past the node's limit (serving/http/http_limits.py)."""

    http_status = 413
    code = "BODY_TOO_LARGE"


class RequestHeaderTooLarge(StreamiqError):
    """The request line and headers are past the node's limit."""

    http_status = 431
    code = "HEADER_TOO_LARGE"


class RequestTimeout(StreamiqError):
    """The client did not send a whole request in time (``--request-read-timeout-s``)."""

    http_status = 408
    code = "REQUEST_TIMEOUT"


class NotFound(StreamiqError):
    http_status = 404
    code = "NOT_FOUND"


class UnknownView(NotFound):
    code = "UNKNOWN_VIEW"


class NotActive(StreamiqError):
    """This node does not hold (or has not restored) the partition: ask another."""

    http_status = 421
    code = "NOT_ACTIVE"


class TooManySubscriptions(StreamiqError):
    """Live subscriptions past the node's or the token's limit."""

    http_status = 429
    code = "TOO_MANY_SUBSCRIPTIONS"


class Unavailable(StreamiqError):
    http_status = 503
    code = "UNAVAILABLE"


class Overloaded(Unavailable):
    """A bounded resource of the node is full (e.g. queries waiting for a position)."""

    code = "OVERLOADED"


class NotUpToBound(Unavailable):
    """The answering replica did not reflect the position within the wait."""

    code = "NOT_UP_TO_BOUND"


class CutMoved(StreamiqError):
    """A read at one cut of the input cannot be answered at that cut here: ``lower`` (a
    position token) names a lower cut to ask again at, or None: take a newer one. Between
    nodes only: the entry asks again (``serving/changelog/cuts.py``)."""

    http_status = 409
    code = "CUT_MOVED"


class DeadlineExceeded(StreamiqError):
    """No answer within the caller's budget (every hop carries what is left of it)."""

    http_status = 504
    code = "DEADLINE_EXCEEDED"


class PeerError(StreamiqError):
    """Another node could not be asked (transport level): try the next replica."""

    http_status = 502
    code = "PEER_ERROR"

    def __init__(self, address: str, cause: BaseException) -> None:
        super().__init__(f"{address}: {cause!r}")
        self.address = address
        self.cause = cause


class PeerUnreachable(PeerError):
    """The connection was refused or lost: the peer is likely gone (a suspect)."""


class PeerTimeout(PeerError):
    """The peer did not answer in time: it may only be slow (not blamed)."""


def _classes(base: type[StreamiqError] = StreamiqError) -> dict[str, type[StreamiqError]]:
    out = {base.code: base}
    for sub in base.__subclasses__():
        out.update({k: v for k, v in _classes(sub).items() if k not in out})
    return out


def from_problem(status: int, body: bytes) -> StreamiqError:
    """The error a problem document names (``render``'s inverse: its ``code``, else its
    status), with its detail and extra members: a peer's error reply, typed again."""
    try:
        doc = json.loads(body)
        code, detail = str(doc.pop("code")), str(doc.pop("detail", None) or doc.get("title"))
        extra = {k: v for k, v in doc.items() if k not in ("type", "title", "status")}
    except (ValueError, KeyError, AttributeError, TypeError):
        code, detail, extra = "", body[:200].decode("utf-8", "replace"), {}
    cls = _classes().get(code) or (BadRequest if 400 <= status < 500 else StreamiqError)
    err = cls.__new__(cls)  # StreamiqError's own __init__: a subclass's may take others
    StreamiqError.__init__(err, detail, **extra)
    err.http_status = status
    return err
