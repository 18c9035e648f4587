"""What a node or the ingest reads of one HTTP request: bounded in size and in time.

A server that keeps every header and the whole body in memory with no bound (uvicorn's
httptools protocol did: an outside probe sent a 50 MB multi-get key, answered after
13 s, +230 MB; the ingest read a 300 MB body whole before checking its token: RSS
85 -> 936 MB) or never closes a connection that stops halfway through a request is
easy to hurt. So the node's HTTP protocol (``serving/http/protocol.py``) counts what it
reads with these limits:

* request line and headers past ``MAX_HEAD_BYTES``, or more than ``MAX_HEADERS`` header
  fields, are answered ``431``. The bytes fed to the parser while a head is incomplete
  are counted too, since httptools holds a header until its end (one 100 MB header);
* a body past ``MAX_BODY_BYTES`` is ``413``: decided from ``Content-Length`` before any
  of it is read, or counted as it comes (chunked);
* a ``gate`` (``HttpEdge``) may refuse a request from its head alone, before its body is
  read (the ingest checks the token there: 401 for a 300 MB body not read);
* a request not received whole within ``request_read_timeout_s`` of its first byte (of
  the connection, for the first one) is ``408``, when nothing else is being answered on
  the connection, and the connection closed (slowloris: one header byte at a time);
* a request httptools cannot parse is ``400``.

Each answer is a JSON problem document naming the limit, followed by a lingering close
(nothing more of that connection is kept), and is counted by reason in ``Refusals``.
The largest legitimate request, a multi-get of 1000 keys of 1024 bytes (``MAX_KEYS``,
``MAX_KEY_BYTES``), stays well under the body limit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from time import monotonic

from streamiq._http import problem
from streamiq.errors import PayloadTooLarge, RequestHeaderTooLarge, StreamiqError

__all__ = ["LINGER_S", "MAX_BODY_BYTES", "MAX_HEADERS", "MAX_HEAD_BYTES", "Gate", "HttpEdge",
           "ReadBounds", "Refusals", "check_head", "head_too_large", "refusal"]

log = logging.getLogger("streamiq.http")

MAX_HEAD_BYTES = 64 * 1024
MAX_HEADERS = 100
MAX_BODY_BYTES = 4 * 1024 * 1024
LINGER_S = 2.0
LOG_EVERY_S = 10.0  # refusals are logged at most once per reason this often

#: Sees a request's method and headers (names in lower case) before its body is read;
#: raises a ``StreamiqError`` to refuse it.
Gate = Callable[[bytes, list[tuple[bytes, bytes]]], None]


@dataclass
class Refusals:
    """Requests refused while read, by reason (the error's code in lower case), each
    reason logged at most once per ``LOG_EVERY_S`` (a flood is one line, with a count)."""

    counts: dict[str, int] = field(default_factory=dict)
    _logged: dict[str, tuple[float, int]] = field(default_factory=dict)

    def note(self, err: StreamiqError, client: object) -> None:
        reason = err.code.lower()
        n = self.counts[reason] = self.counts.get(reason, 0) + 1
        at, before = self._logged.get(reason, (float("-inf"), 0))
        if monotonic() - at >= LOG_EVERY_S:
            self._logged[reason] = (monotonic(), n)
            log.warning("refused %d HTTP request(s) (%s) since the last such line; the last, "
                        "from %s: %s", n - before, reason, client, err.message)


@dataclass(frozen=True)
class HttpEdge:
    """The limits a server reads its requests with (``serving/http/server.py``)."""

    request_read_timeout_s: float = 20.0
    gate: Gate | None = None
    refusals: Refusals = field(default_factory=Refusals)


class ReadBounds:
    """One connection's count of the request being read against the limits. Each
    ``add_*`` returns the error that refuses the request, or None."""

    __slots__ = ("body", "fed", "head", "headers")

    def __init__(self) -> None:
        self.fed = 0  # bytes fed to the parser since the last request ended
        self.head = self.headers = self.body = 0

    def begin(self) -> None:
        """A new request's line begins (``fed`` counts on until the last one ended)."""
        self.head = self.headers = self.body = 0

    def ended(self) -> None:
        self.fed = 0

    def room(self) -> int:
        """How many more bytes of a head may be fed to the parser (one past the limit)."""
        return MAX_HEAD_BYTES + 1 - self.fed

    def add_head(self, n: int) -> StreamiqError | None:
        self.head += n
        return None if self.head <= MAX_HEAD_BYTES else head_too_large()

    def add_header(self, n: int) -> StreamiqError | None:
        self.headers += 1
        if self.headers > MAX_HEADERS:
            return RequestHeaderTooLarge(f"the request has more than {MAX_HEADERS} header "
                                         f"fields", limit=MAX_HEADERS)
        return self.add_head(n)

    def add_body(self, n: int) -> StreamiqError | None:
        self.body += n
        if self.body <= MAX_BODY_BYTES:
            return None
        return PayloadTooLarge(f"the request body is more than {MAX_BODY_BYTES} bytes",
                               limit=MAX_BODY_BYTES)


def check_head(edge: HttpEdge, method: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    """The gate, then the announced body size: raises what refuses the request."""
    if edge.gate is not None:
        edge.gate(method, headers)
    length = _content_length(headers)
    if length is not None and length > MAX_BODY_BYTES:
        raise PayloadTooLarge(f"the request body is {length} bytes, more than "
                              f"{MAX_BODY_BYTES}", limit=MAX_BODY_BYTES)


def head_too_large() -> RequestHeaderTooLarge:
    return RequestHeaderTooLarge(f"the request line and headers are more than "
                                 f"{MAX_HEAD_BYTES} bytes", limit=MAX_HEAD_BYTES)


def refusal(err: StreamiqError) -> bytes:
    """The whole HTTP answer of ``err`` (``_http.problem``, the one mapping), then the
    connection closes."""
    status, body, headers = problem(err)
    return b"".join((b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode()),
                     *(b"%s: %s\r\n" % h for h in headers),
                     b"connection: close\r\n\r\n", body))


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
