"""Size limits on what a node reads of one HTTP request, enforced while it is parsed.

uvicorn's httptools protocol keeps every header and the whole body in memory with no
bound (an outside probe sent a 50 MB multi-get key: answered after 13 s, +230 MB), and
h11's ``h11_max_incomplete_event_size`` does not apply to httptools. So the parser
callbacks count: request line and headers past ``MAX_HEAD_BYTES`` are answered ``431``,
a body past ``MAX_BODY_BYTES`` (announced by ``Content-Length`` or counted as it comes)
``413``, each with a JSON body naming the limit, and the connection is ended (a
lingering close): nothing more of that request is kept. The largest legitimate request, a
multi-get of 1000 keys of 1024 bytes (``MAX_KEYS``, ``MAX_KEY_BYTES``), stays well under
the body limit.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from streamiq.errors import PROBLEM_JSON, PayloadTooLarge, RequestHeaderTooLarge, StreamiqError

__all__ = ["MAX_BODY_BYTES", "MAX_HEAD_BYTES", "LimitedHttpProtocol"]

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 4 * 1024 * 1024
LINGER_S = 2.0


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol that refuses requests past the size limits."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0  # bytes of the current request's line and headers
        self._body_bytes = 0
        self._refused = False  # answered 431/413: ignore the rest of what was read

    def on_message_begin(self) -> None:
        self._head_bytes = self._body_bytes = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        if not self._refused and self._counted_head(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._refused and self._counted_head(len(name) + len(value) + 4):
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        length = _content_length(self.headers)
        if length is not None and length > MAX_BODY_BYTES:
            self._refuse(PayloadTooLarge(f"the request body is {length} bytes, more than "
                                         f"{MAX_BODY_BYTES}", limit=MAX_BODY_BYTES))
            return
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
        if not self._refused:
            super().on_message_complete()

    def _counted_head(self, n: int) -> bool:
        self._head_bytes += n
        if self._head_bytes <= MAX_HEAD_BYTES:
            return True
        self._refuse(RequestHeaderTooLarge(f"the request line and headers are more than "
                                           f"{MAX_HEAD_BYTES} bytes", limit=MAX_HEAD_BYTES))
        return False

    def _refuse(self, err: StreamiqError) -> None:
        """Answer the error and end the connection; read nothing more of it into memory.

        A lingering close, as nginx does: the answer is followed by a FIN, and what the
        client still sends is read and dropped for ``LINGER_S`` before the socket is
        closed. Closing at once would make the kernel answer the unread bytes with a
        reset, which a client still writing its body sees instead of the answer."""
        self._refused = True
        body = err.render()
        write = getattr(self.transport, "write_now", self.transport.write)  # not held back
        write(b"".join((
            b"HTTP/1.1 %d %s\r\n" % (err.http_status, _phrase(err.http_status)),
            b"content-type: %s\r\ncontent-length: %d\r\n" % (PROBLEM_JSON.encode(), len(body)),
            b"connection: close\r\n\r\n", body)))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    for name, value in headers:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def _phrase(status: int) -> bytes:
    return HTTPStatus(status).phrase.encode()
