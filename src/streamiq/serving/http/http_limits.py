"""What a node or the ingest reads of one HTTP request: bounded in size and in time.

uvicorn's httptools protocol keeps every header and the whole body in memory with no
bound (an outside probe sent a 50 MB multi-get key: answered after 13 s, +230 MB; the
ingest read a 300 MB body whole before checking its token: RSS 85 -> 936 MB), never
closes a connection that stops halfway through a request, and h11's
``h11_max_incomplete_event_size`` does not apply to httptools. So this protocol counts:

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

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from time import monotonic
from typing import Any, ClassVar, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from streamiq.errors import (
    PROBLEM_JSON,
    BadRequest,
    PayloadTooLarge,
    RequestHeaderTooLarge,
    RequestTimeout,
    StreamiqError,
)

__all__ = ["MAX_BODY_BYTES", "MAX_HEADERS", "MAX_HEAD_BYTES", "Gate", "HttpEdge",
           "LimitedHttpProtocol", "Refusals"]

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
    """How a server's ``LimitedHttpProtocol`` is set up (``with_edge``)."""

    request_read_timeout_s: float = 20.0
    gate: Gate | None = None
    refusals: Refusals = field(default_factory=Refusals)


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that refuses requests past the limits."""

    edge: ClassVar[HttpEdge] = HttpEdge()

    @classmethod
    def with_edge(cls, edge: HttpEdge) -> type[LimitedHttpProtocol]:
        """This protocol (or subclass) with ``edge``: what ``uvicorn.Config(http=)`` takes."""
        return cast(type[LimitedHttpProtocol], type(cls.__name__, (cls,), {"edge": edge}))

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0  # bytes of the current request's line and headers, parsed
        self._fed = 0  # bytes fed to the parser since the last request ended
        self._headers = 0
        self._body_bytes = 0
        self._in_head = True  # reading a request's line and headers (or waiting for one)
        self._refused = False  # answered 4xx here: ignore the rest of what is read
        self._deadline: float | None = None  # when the request being read must be whole
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        while data and not self._refused:
            if not self._in_head:
                super().data_received(data)
                return
            room = MAX_HEAD_BYTES + 1 - self._fed
            part, data = data[:room], data[room:]
            self._fed += len(part)
            super().data_received(part)
            if self._in_head and self._fed > MAX_HEAD_BYTES and not self._refused:
                self._refuse(_head_too_large())

    def send_400_response(self, msg: str) -> None:  # httptools could not parse it
        self._refuse(BadRequest(f"not an HTTP/1.1 request: {msg}"))

    def on_message_begin(self) -> None:
        self._head_bytes = self._headers = self._body_bytes = 0
        if self._deadline is None:
            self._start_reading()
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        if not self._refused and self._counted_head(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers += 1
        if self._headers > MAX_HEADERS and not self._refused:
            self._refuse(RequestHeaderTooLarge(f"the request has more than {MAX_HEADERS} "
                                               f"header fields", limit=MAX_HEADERS))
        if not self._refused and self._counted_head(len(name) + len(value) + 4):
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        try:
            self._check_head()
        except StreamiqError as err:
            self._refuse(err)
            return
        self._in_head = False
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._refused:
            return
        self._body_bytes += len(body)
        if self._body_bytes > MAX_BODY_BYTES:
            self._refuse(PayloadTooLarge(f"the request body is more than {MAX_BODY_BYTES} "
                                         f"bytes", limit=MAX_BODY_BYTES))
            return
        super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._in_head, self._fed, self._deadline = True, 0, None  # read whole, in time
        super().on_message_complete()

    def _check_head(self) -> None:
        """The gate, then the announced body size: raises what refuses the request."""
        if self.edge.gate is not None:
            self.edge.gate(self.parser.get_method(), self.headers)
        length = _content_length(self.headers)
        if length is not None and length > MAX_BODY_BYTES:
            raise PayloadTooLarge(f"the request body is {length} bytes, more than "
                                  f"{MAX_BODY_BYTES}", limit=MAX_BODY_BYTES)

    def _counted_head(self, n: int) -> bool:
        self._head_bytes += n
        if self._head_bytes <= MAX_HEAD_BYTES:
            return True
        self._refuse(_head_too_large())
        return False

    # --- the read deadline: one timer per connection, moved on only when it fires ---

    def _start_reading(self) -> None:
        self._deadline = self.loop.time() + self.edge.request_read_timeout_s
        if self._timer is None:
            self._timer = self.loop.call_at(self._deadline, self._deadline_passed)

    def _stop_reading(self) -> None:
        """No HTTP request is read on this connection any more (the lookup wire took it)."""
        self._deadline = None

    def _deadline_passed(self) -> None:
        self._timer = None
        if self._deadline is None or self._refused or self.transport.is_closing():
            return  # between requests: uvicorn's keep-alive timeout closes idle ones
        now = self.loop.time()
        if self.flow.read_paused:  # the server holds the request back, not the client
            self._deadline = now + self.edge.request_read_timeout_s
        if now < self._deadline:
            self._timer = self.loop.call_at(self._deadline, self._deadline_passed)
            return
        t = self.edge.request_read_timeout_s
        self._refuse(RequestTimeout(f"the request was not received whole within {t:g} s",
                                    limit_s=t))

    # --- refusing ---

    def _answerable(self) -> bool:
        """Whether a refusal may be answered: not while a response is being written. In
        a body, the request's own app is cut off (its receive() sees a disconnect)."""
        cycle = self.cycle
        if cycle is None:
            return True
        if self._in_head:  # the cycle is an earlier request's
            return cycle.response_complete
        cycle.disconnected = True
        cycle.message_event.set()
        return not cycle.response_started

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
        write = getattr(self.transport, "write_now", self.transport.write)  # not held back
        write(_answer(err))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


def _head_too_large() -> RequestHeaderTooLarge:
    return RequestHeaderTooLarge(f"the request line and headers are more than "
                                 f"{MAX_HEAD_BYTES} bytes", limit=MAX_HEAD_BYTES)


def _answer(err: StreamiqError) -> bytes:
    body = err.render()
    status = err.http_status
    extra = b"www-authenticate: Bearer\r\n" if status == 401 else b""
    return b"".join((
        b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode()),
        b"content-type: %s\r\ncontent-length: %d\r\n" % (PROBLEM_JSON.encode(), len(body)),
        extra, b"connection: close\r\n\r\n", body))


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
