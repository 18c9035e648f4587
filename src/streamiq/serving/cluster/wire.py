"""The node-to-node lookup wire: a forwarded key lookup without HTTP on the owner.

A hop connection opens with ``PREFACE`` on the node's own HTTP port (no second port to
configure, advertise or open in a firewall). The node's HTTP protocol sees the preface
in the connection's first bytes and hands the connection to a ``WireServer``; anything
else stays HTTP. The preface is followed by the cluster credential
(``streamiq.auth.hop_mark``) on a line of its own: a connection without it gets one 401
reply and is closed, before any lookup. Then frames, one lookup at a time per
connection, in order::

    request  b"<partition> <partitions> <raw path> <client token or ->\\n"
    reply    b"<status> <body length>\\n<body>"

The raw path is the client's request path, still percent-encoded (no spaces); the token
is the client's bearer token, which the owner checks as its HTTP route would. The
entry names the partition it computed and the view's partition count it computed it
with: the owner answers 421 unless it holds that partition and counts the same (the
same key and count give the same partition, so the owner does not hash the key
again). Status and body are exactly what the HTTP route answers a forwarded request
(200, 404, 421...).

Why: a forwarded lookup costs the owner what a client's lookup costs it, and most of
that is HTTP serving (uvicorn's per-request parsing, scope, cycle, headers and timers),
which the entry node's request already paid once. Measured with
bench/bench_queries.py (docs/design.md, "Forwarded lookups").

A peer that does not speak the wire (an older node, or an HTTP-only proxy in front of
it) answers the preface with an HTTP error; the client raises ``WireUnsupported`` and
the caller uses an HTTP hop instead.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Callable

from streamiq.errors import BadRequest, StreamiqError, Unauthenticated

__all__ = ["MAX_LINE", "PREFACE", "WireServer", "WireUnsupported", "answer", "reply_frame",
           "request_frame"]

log = logging.getLogger("streamiq.routing")

PREFACE = b"STREAMIQ-HOP/1\n"
MAX_LINE = 8192  # a request line longer than this closes the connection
#: (partition, partitions, raw path, token) -> status, body
Lookup = Callable[[int, int, bytes, bytes], tuple[int, bytes]]
_MALFORMED = BadRequest("malformed wire request").render()
_NO_CREDENTIAL = Unauthenticated("a lookup wire without the cluster credential").render()


class WireUnsupported(ConnectionError):
    """The peer answered the preface with something else (HTTP): use an HTTP hop."""


def request_frame(partition: int, partitions: int, raw_path: bytes, token: bytes) -> bytes:
    return b"%d %d %s %s\n" % (partition, partitions, raw_path, token)


def reply_frame(status: int, body: bytes) -> bytes:
    return b"%d %d\n%s" % (status, len(body), body)


def answer(lookup: Lookup, partition: int, partitions: int, raw_path: bytes, token: bytes
           ) -> tuple[int, bytes]:
    """The lookup's status and body; the one place a ``StreamiqError`` becomes a wire
    reply (the same status and body as its HTTP answer). Anything else is a 500."""
    try:
        return lookup(partition, partitions, raw_path, token)
    except StreamiqError as exc:
        return exc.http_status, exc.render()
    except Exception:
        log.exception("wire lookup failed")
        return 500, StreamiqError("lookup failed").render()


class WireServer:
    """The owner's side of one wire connection: lines in, frames out.

    Lookups are answered synchronously (a store read), so replies leave in request
    order; all the replies to one read leave in one write. A connection with no
    request for ``idle_timeout`` to twice that long is closed, like an idle HTTP
    keep-alive connection.
    """

    __slots__ = ("_buf", "_lookup", "_mark", "_seen", "_timeout", "_timer", "_transport")

    def __init__(self, lookup: Lookup, transport: asyncio.Transport,
                 loop: asyncio.AbstractEventLoop, idle_timeout: float, mark: bytes) -> None:
        self._lookup = lookup
        self._mark: bytes | None = mark  # the credential line expected first (then None)
        self._transport = transport
        self._buf = b""
        self._seen = True
        self._timeout = idle_timeout
        self._timer: asyncio.TimerHandle | None = loop.call_later(idle_timeout, self._idle)

    @property
    def authenticated(self) -> bool:
        """The peer sent the cluster credential line (a stalled stranger has not)."""
        return self._mark is None

    def feed(self, data: bytes) -> None:
        self._seen = True
        buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        start = 0
        while (end := buf.find(b"\n", start)) >= 0:
            line = buf[start:end]
            start = end + 1
            if self._mark is not None:
                if not hmac.compare_digest(line, self._mark):
                    log.warning("lookup wire without the cluster credential; closing it")
                    self._transport.write(reply_frame(401, _NO_CREDENTIAL))
                    self._transport.close()
                    self._buf = b""
                    return
                self._mark = None
                continue
            out.append(self._answer(line))
        self._buf = buf[start:]
        if out:
            self._transport.write(out[0] if len(out) == 1 else b"".join(out))
        if len(self._buf) > MAX_LINE:
            log.warning("wire request line over %d bytes; closing the connection", MAX_LINE)
            self._transport.close()

    def _answer(self, line: bytes) -> bytes:
        fields = line.split(b" ")
        if len(fields) != 4 or not (fields[0].isdigit() and fields[1].isdigit()) \
                or len(fields[0]) > 10 or len(fields[1]) > 10:  # int() refuses 4300+ digits
            return reply_frame(400, _MALFORMED)
        return reply_frame(*answer(self._lookup, int(fields[0]), int(fields[1]), fields[2],
                                   fields[3]))

    def _idle(self) -> None:
        if not self._seen:
            self._timer = None
            self._transport.close()
            return
        self._seen = False
        self._timer = asyncio.get_running_loop().call_later(self._timeout, self._idle)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
