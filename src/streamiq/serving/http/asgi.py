"""One HTTP request served as ASGI: its scope, ``receive`` and ``send``.

A ``Cycle`` is made by the node's HTTP protocol (``serving/http/protocol.py``) for each
request it reads and run by ``Cycle.run`` when it is that request's turn (pipelined
requests are answered in order). What it does with the app's messages:

* a response's head is held until its first body message and leaves with it: a whole
  response in one write (one ``send`` syscall, one wake-up of the reader); a streamed
  body (``more_body``) leaves chunk by chunk, each as soon as it is sent (Server-Sent
  Events reach the client at once);
* no ``content-length``: the body is sent chunked (not for HEAD, 204 or 304); HEAD sends
  the head alone; ``connection: close`` from the app or the client closes the
  connection after the response;
* ``receive`` gives the body as it comes (chunked or by length), sends ``100 Continue``
  first when the client asked for it, and gives ``http.disconnect`` once the client has
  gone (or the response is complete): a stream notices the client leaving (ASGI spec
  2.3: ``send`` after that is ignored);
* an app that raises, or returns without answering, gets a 500 problem document (no
  traceback to the client) when nothing was written yet, or the error's own problem
  when it is one of ``streamiq.errors`` (a stream that found no replica: 503);
  otherwise the connection is closed (a client sees a cut response, never a wrong one).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import Any, Protocol

from streamiq.errors import PROBLEM_JSON, StreamiqError

__all__ = ["STATUS_LINE", "ASGIApp", "Connection", "Cycle"]

log = logging.getLogger("streamiq.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]],
                    Callable[[Message], Awaitable[None]]], Awaitable[None]]


def _status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


STATUS_LINE = {status: _status_line(status) for status in range(100, 600)}
_BAD_NAME = re.compile(rb'[\x00-\x20\x7f()<>@,;:\[\]={}\\"/?]')
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_INTERNAL = StreamiqError("the server failed to answer this request").render()


class Connection(Protocol):
    """What a cycle needs of its connection (``HttpProtocol``)."""

    @property
    def default_headers(self) -> bytes:
        """``date: ...\r\nserver: ...\r\n``, rendered once a second."""

    def write(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def is_closing(self) -> bool: ...

    def resume_reading(self) -> None: ...

    async def drain(self) -> None: ...

    def write_paused(self) -> bool: ...

    def streaming(self) -> None: ...

    def answered(self, cycle: Cycle) -> None: ...


class Cycle:
    """One request and its response."""

    __slots__ = (
        "_event",
        "_head",
        "_woken",
        "body",
        "chunked",
        "complete",
        "conn",
        "continue_",
        "disconnected",
        "headers",
        "keep_alive",
        "method",
        "more_body",
        "path",
        "query",
        "raw_path",
        "remaining",
        "scope",
        "started",
        "streaming",
        "t0",
        "version",
    )

    def __init__(self, conn: Connection, method: str, path: str, raw_path: bytes,
                 query: bytes, headers: list[tuple[bytes, bytes]], version: str,
                 keep_alive: bool, expect_continue: bool) -> None:
        self.conn = conn
        self.version = version
        self.method, self.path, self.raw_path, self.query = method, path, raw_path, query
        self.headers = headers
        self.keep_alive = keep_alive
        self.continue_ = expect_continue
        self.scope: Scope | None = None  # built when the app needs it
        self.t0 = 0.0  # when the lean path began answering (its latency metric)
        self.body = bytearray()
        self.more_body = True
        # made when the app first waits in receive(): a lookup answered on the lean
        # path never does (an Event and its two set() calls per request were measured)
        self._event: asyncio.Event | None = None
        self._woken = False
        self.disconnected = False
        self.started = self.complete = self.streaming = False
        self.chunked = False
        self.remaining = 0  # body bytes still due by the response's content-length
        self._head: bytes | None = None  # a response's head, held until its body

    @property
    def busy(self) -> bool:
        """The response is not complete and the client is still there."""
        return not (self.complete or self.disconnected)

    def gone(self) -> None:
        """The client left (or the server cut the request off): receive() says so."""
        if not self.complete:
            self.disconnected = True
        self.wake()

    def wake(self) -> None:
        """Something for receive(): more of the body, its end, or the client gone."""
        if self._event is None:
            self._woken = True
        else:
            self._event.set()

    # --- the app ---

    async def run(self, app: ASGIApp, scope: Scope) -> None:
        self.scope = scope
        try:
            await app(scope, self.receive, self.send)
        except asyncio.CancelledError:
            self._failed(None)
            raise
        except Exception as exc:
            self._failed(exc)
        else:
            if not self.complete and not self.disconnected:
                log.error("%s %s: the app returned without completing its response",
                          self.method, self.path)
                self._failed(None)

    def _failed(self, exc: Exception | None) -> None:
        # an error of the hierarchy raised where it was found (a stream that finds no
        # replica: 503) is its own answer; anything else is the server's fault
        known = exc if isinstance(exc, StreamiqError) and exc.code != "INTERNAL" else None
        if known is not None:
            log.warning("%s %s: %s", self.method, self.path, known)
        elif exc is not None:
            log.error("%s %s: the app failed", self.method, self.path, exc_info=exc)
        if self.complete or self.disconnected:
            return
        if not self.streaming:  # nothing written yet (a head is held back): its problem
            status, body = (500, _INTERNAL) if known is None else (known.http_status,
                                                                   known.render())
            self._head = None
            self.keep_alive = False
            self.conn.write(b"".join((
                STATUS_LINE[status], self.conn.default_headers,
                b"content-type: %s\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
                % (PROBLEM_JSON.encode(), len(body)), body)))
            self.finish()
        else:
            self.disconnected = True
            self.conn.close()

    async def receive(self) -> Message:
        if self.continue_:
            self.continue_ = False
            if not self.started and not self.conn.is_closing():
                self.conn.write(_CONTINUE)
        if not self.disconnected and not self.complete:
            if self.more_body:
                self.conn.resume_reading()
            event = self._event
            if event is None:
                event = self._event = asyncio.Event()
                if self._woken:
                    event.set()
            await event.wait()
            event.clear()
        if self.disconnected or self.complete:
            return {"type": "http.disconnect"}
        body = bytes(self.body)
        self.body.clear()
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: Message) -> None:
        if self.conn.write_paused() and not self.disconnected:
            await self.conn.drain()
        if self.disconnected:
            return
        kind = message["type"]
        if not self.started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected http.response.start, got {kind!r}")
            self.started = True
            self.continue_ = False
            self._head = self._render_head(message["status"], message.get("headers", ()))
            return
        if self.complete:
            raise RuntimeError(f"{kind!r} sent after the response was complete")
        if kind != "http.response.body":
            raise RuntimeError(f"expected http.response.body, got {kind!r}")
        self._body(message.get("body", b""), message.get("more_body", False))

    # --- writing ---

    def _render_head(self, status: int, headers: Any) -> bytes:
        out = [STATUS_LINE[status], self.conn.default_headers]
        length: int | None = None
        chunked = False
        for name, value in headers:
            if _BAD_NAME.search(name) or _BAD_VALUE.search(value):
                raise RuntimeError(f"invalid response header {name!r}")
            name = name.lower()
            if name == b"content-length" and length is None:
                length = int(value)
            elif name == b"transfer-encoding" and value.lower() == b"chunked":
                chunked = True
            elif name == b"content-type" and value.startswith(b"text/event-stream"):
                self.conn.streaming()  # a live stream: little held in the kernel
            elif name == b"connection" and b"close" in value.lower():
                self.keep_alive = False
                continue  # written once, below
            out += (name, b": ", value, b"\r\n")
        bodiless = self.method == "HEAD" or status in (204, 304) or status < 200
        if length is None and not chunked and not bodiless:
            chunked = True
            out.append(b"transfer-encoding: chunked\r\n")
        self.chunked = chunked and not bodiless
        self.remaining = 0 if bodiless or length is None else length
        if not self.keep_alive:
            out.append(b"connection: close\r\n")
        out.append(b"\r\n")
        return b"".join(out)

    def _body(self, body: bytes, more: bool) -> None:
        out = []
        if self._head is not None:
            out.append(self._head)
            self._head = None
        if self.method == "HEAD":
            pass
        elif self.chunked:
            if body:
                out += (b"%x\r\n" % len(body), body, b"\r\n")
            if not more:
                out.append(b"0\r\n\r\n")
        elif body:
            if len(body) > self.remaining:
                raise RuntimeError("response content longer than its content-length")
            self.remaining -= len(body)
            out.append(body)
        if out:
            self.conn.write(out[0] if len(out) == 1 else b"".join(out))
        if more:
            self.streaming = True
            return
        if self.remaining:
            raise RuntimeError("response content shorter than its content-length")
        self.finish()

    def finish(self) -> None:
        """The response is written whole: the connection goes on to the next request."""
        self.complete = True
        self.wake()
        self.conn.answered(self)
