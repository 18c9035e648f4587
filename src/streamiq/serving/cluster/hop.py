"""The lookup wire's client: pooled keep-alive connections for a key lookup's hop.

The lookup wire (``serving/cluster/wire.py``): a preface, then one framed lookup at a time per
connection. The rare HTTP hops (peers that answer the wire's preface with HTTP, which
are then left on HTTP for a minute) take the one HTTP hop every call to a peer takes
(``Peers.http_hop``, the pooled aiohttp session); this client only remembers
which peers do not speak the wire.

Why not aiohttp for the wire: bench/bench_queries.py measured a forwarded lookup at
~5x the server CPU of a local one, most of it in the general-purpose client on the
entry node (request building, cookie and redirect handling, response objects, timers).
A key lookup hop needs none of that: one frame on a pooled connection.

Failures are plain ``OSError`` subclasses (``ConnectionError`` when the connection was
refused or lost) or ``asyncio.TimeoutError``, like the HTTP client's: ``serving/cluster/peers.py``
maps both to ``PeerError`` in one place (``Peers.forward_lookup``, ``peer_error``). A
request on a reused idle connection that the server had already
closed (nodes drop idle connections after a few seconds) is retried once on a fresh
connection: safe, because lookups are idempotent.

Two ways to call it: ``await fetch(...)`` (connects or waits for a slot if it must),
and ``lookup(..., then)``, which only uses an idle pooled connection and reports the
reply (or None on any failure, without retrying) to a callback: no coroutine, no
future.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from ssl import SSLContext
from typing import Any, NamedTuple, cast

from streamiq.serving.cluster.wire import PREFACE, WireUnsupported

__all__ = ["HopClient", "HopReply"]

log = logging.getLogger("streamiq.routing")

_NO_WIRE_S = 60.0  # how long a peer that answered the preface with HTTP gets HTTP hops


class HopReply(NamedTuple):  # a tuple: built once per hop, on the hot path
    status: int
    headers: dict[bytes, bytes]  # lower-case names, raw bytes (relayed as they came)
    body: bytes


_Settle = Callable[[HopReply | None, Exception | None], None]


class _Conn(asyncio.Protocol):
    """One connection; at most one request in flight. Subclasses parse the replies."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._then: _Settle | None = None  # the request in flight, if any
        self._got_bytes = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._prefix = b""  # sent with the first request (the wire's preface)

    # -- asyncio.Protocol --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        try:
            self._feed(data)
        except ConnectionError as exc:
            self._fail(exc)
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()
        self._fail(ConnectionResetError("connection closed by the peer")
                   if exc is None else ConnectionResetError(str(exc)))

    def _feed(self, data: bytes) -> None:
        """Parse reply bytes; ``_settle`` a whole reply; raise ConnectionError if malformed."""
        raise NotImplementedError

    def _begin(self) -> None:
        """Reset the parse state for the next reply."""

    # -- use --
    def _fail(self, exc: Exception) -> None:
        self._settle(None, exc)

    def _settle(self, reply: HopReply | None, exc: Exception | None) -> None:
        then, self._then = self._then, None
        if then is not None:
            then(reply, exc)

    def _check(self) -> None:
        """The timer: a request in flight past its deadline fails; the timer stays armed
        while requests keep coming (no timer per request)."""
        self._timer = None
        if self._then is None or self.closed:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._deadline:
            self._timer = loop.call_at(self._deadline, self._check)
            return
        self._fail(TimeoutError("no reply from the peer in time"))
        self.close()  # a late reply must not be read as the next request's

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.close()

    def call(self, raw: bytes, timeout: float, then: _Settle) -> None:
        """Send one request; ``then(reply, None)`` or ``then(None, error)`` runs exactly
        once, from the event loop's callbacks. The write is the last thing done here: on
        loopback it wakes the peer, which may then share this CPU until we yield it."""
        assert self.transport is not None and self._then is None
        self._begin()
        self._got_bytes = False
        self._then = then
        loop = asyncio.get_running_loop()
        self._deadline = loop.time() + timeout
        if self._timer is None or self._timer.when() > self._deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(self._deadline, self._check)
        if self._prefix:
            raw, self._prefix = self._prefix + raw, b""
        self.transport.write(raw)

    def request(self, raw: bytes, timeout: float) -> asyncio.Future[HopReply]:
        fut: asyncio.Future[HopReply] = asyncio.get_running_loop().create_future()

        def then(reply: HopReply | None, exc: Exception | None) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(cast(HopReply, reply))

        self.call(raw, timeout, then)
        return fut

    @property
    def silent(self) -> bool:
        """True when the last request failed before the server sent a single byte."""
        return not self._got_bytes


class _WireConn(_Conn):
    """A lookup-wire connection (``serving/cluster/wire.py``): preface, then frames."""

    def __init__(self, mark: bytes) -> None:
        super().__init__()
        self._buf = b""
        self._prefix = PREFACE + mark + b"\n"  # the cluster credential after the preface

    def _begin(self) -> None:
        self._buf = b""

    def _feed(self, data: bytes) -> None:
        buf = self._buf + data if self._buf else data
        head, sep, body = buf.partition(b"\n")
        if not sep:
            if len(buf) > 64 or buf.startswith(b"HTTP/"):
                raise WireUnsupported(f"not a wire reply: {buf[:32]!r}")
            self._buf = buf
            return
        status, _, length = head.partition(b" ")
        if not (status.isdigit() and length.isdigit()):
            raise WireUnsupported(f"not a wire reply: {head[:32]!r}")
        size = int(length)
        if len(body) < size:
            self._buf = buf
            return
        if len(body) > size or self._then is None:
            raise ConnectionError("unexpected bytes after a wire reply")
        self._buf = b""
        self._settle(HopReply(int(status), {}, body), None)


class _Host:
    """One peer: idle connections, requests in flight,
    requests waiting for a slot."""

    __slots__ = ("address", "answered", "busy", "idle", "waiters")

    def __init__(self, address: str) -> None:
        self.address = address
        self.idle: list[_Conn] = []
        self.busy = 0
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.answered = 0  # requests that got a reply


class HopClient:
    """Pooled keep-alive lookups to other nodes over the lookup wire.

    ``await fetch("host:port", frame)`` is a key lookup (``serving/cluster/wire.py``). At most
    ``max_per_host`` requests per node are in flight (each on its own connection);
    further ones wait for a slot within their timeout. ``lookup`` is the same request on
    a callback, made only when a pooled connection and a slot are free right now (False
    otherwise).
    """

    def __init__(self, *, mark: bytes = b"1", ssl: SSLContext | None = None,
                 max_per_host: int = 64, max_idle_per_host: int = 32,
                 connect_timeout: float = 1.0) -> None:
        self._mark = mark  # the cluster credential (streamiq.auth.hop_mark)
        self._ssl = ssl  # TLS to peers (streamiq/tls.py), or plain TCP
        self._wire_hosts: dict[str, _Host] = {}
        self._no_wire: dict[str, float] = {}  # peer -> until when it gets HTTP hops only
        self._max_per_host = max_per_host  # connections in use; more requests queue
        self._max_idle = max_idle_per_host
        self._connect_timeout = connect_timeout

    def stats(self) -> dict[str, Any]:
        """Wire replies received, and the peers getting HTTP hops only for now."""
        return {"wire": sum(h.answered for h in self._wire_hosts.values()),
                "http_only_peers": sorted(a for a in list(self._no_wire)
                                          if not self.speaks_wire(a))}

    def pool(self, address: str) -> dict[str, int]:
        """The wire connections to one peer: idle (pooled), busy (a request in flight),
        and requests waiting for a connection slot."""
        host = self._wire_hosts.get(address)
        if host is None:
            return {"idle": 0, "busy": 0, "waiting": 0}
        return {"idle": len(host.idle), "busy": host.busy, "waiting": len(host.waiters)}

    def speaks_wire(self, address: str) -> bool:
        """False for a while after the peer answered the wire's preface with HTTP."""
        until = self._no_wire.get(address)
        if until is None:
            return True
        if time.monotonic() < until:
            return False
        del self._no_wire[address]
        return True

    def lookup(self, address: str, frame: bytes, then: Callable[[HopReply | None], None],
               timeout: float = 10.0) -> bool:
        """A lookup-wire request (``wire.request_frame``) on an idle pooled connection,
        if one is free right now.

        True: ``then(reply)`` will run from the event loop's callbacks, ``then(None)``
        if the request failed (no retry here: a stale idle connection fails too, and
        the caller falls back to its slower path). False: nothing was sent (nor while
        the peer does not speak the wire); use ``fetch``.
        """
        host = self._wire_hosts.get(address)
        if host is None or host.busy >= self._max_per_host:
            return False
        conn = _pooled(host)
        if conn is None:
            return False
        host.busy += 1

        def settled(reply: HopReply | None, exc: Exception | None) -> None:
            try:
                then(reply)  # first: the reply is on its way before the pool's bookkeeping
            except Exception:
                log.exception("hop reply handler failed")
            self._release(host)
            if exc is None:
                host.answered += 1
                self._checkin(host, conn)
            else:
                conn.close()
                self._failed(host, exc)

        conn.call(frame, timeout, settled)
        return True

    async def fetch(self, address: str, frame: bytes, timeout: float = 10.0) -> HopReply:
        """A lookup-wire request; ``WireUnsupported`` if the peer does not speak it."""
        host = self._host(address)
        try:
            return await self._fetch(host, frame, timeout)
        except WireUnsupported as exc:
            self._failed(host, exc)
            raise

    def _failed(self, host: _Host, exc: Exception) -> None:
        if isinstance(exc, WireUnsupported) and host.address not in self._no_wire:
            log.warning("%s does not speak the lookup wire (%s); HTTP hops for %.0f s",
                        host.address, exc, _NO_WIRE_S)
            self.http_only(host.address, _NO_WIRE_S)

    def http_only(self, address: str, seconds: float) -> None:
        """Send ``address`` HTTP hops only, for ``seconds`` (as after it answered the
        wire's preface with HTTP)."""
        self._no_wire[address] = time.monotonic() + seconds

    def _host(self, address: str) -> _Host:
        host = self._wire_hosts.get(address)
        if host is None:
            host = self._wire_hosts[address] = _Host(address)
        return host

    async def _fetch(self, host: _Host, raw: bytes, timeout: float) -> HopReply:
        async with asyncio.timeout(timeout):
            await self._acquire(host)
            try:
                return await self._get(host, raw, timeout)
            finally:
                self._release(host)

    async def _acquire(self, host: _Host) -> None:
        if host.busy < self._max_per_host:
            host.busy += 1
            return
        slot = asyncio.get_running_loop().create_future()
        host.waiters.append(slot)
        try:
            await slot  # _release hands its slot over
        except BaseException:
            if slot.done() and not slot.cancelled():
                self._release(host)  # handed over just as we gave up: pass it on
            else:
                host.waiters.remove(slot)
            raise

    @staticmethod
    def _release(host: _Host) -> None:
        while host.waiters:
            slot = host.waiters.popleft()
            if not slot.done():
                slot.set_result(None)
                return
        host.busy -= 1

    async def _get(self, host: _Host, raw: bytes, timeout: float) -> HopReply:
        conn, reused = await self._checkout(host)
        try:
            reply = await _roundtrip(conn, raw, timeout)
        except ConnectionError:
            if not (reused and conn.silent):
                raise
            conn = await self._connect(host)  # a stale idle connection: once more
            reply = await _roundtrip(conn, raw, timeout)
        host.answered += 1
        self._checkin(host, conn)
        return reply

    async def _checkout(self, host: _Host) -> tuple[_Conn, bool]:
        conn = _pooled(host)
        if conn is not None:
            return conn, True
        return await self._connect(host), False

    async def _connect(self, host: _Host) -> _Conn:
        name, _, port = host.address.rpartition(":")
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout):
            _, conn = await loop.create_connection(
                lambda: _WireConn(self._mark), name, int(port), ssl=self._ssl,
                server_hostname=name if self._ssl else None)
        return conn

    def _checkin(self, host: _Host, conn: _Conn) -> None:
        if conn.closed:
            return
        if len(host.idle) < self._max_idle:
            host.idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        for host in self._wire_hosts.values():
            for conn in host.idle:
                conn.close()
            host.idle.clear()


def _pooled(host: _Host) -> _Conn | None:
    """The most recently used idle connection still open (closed ones are dropped)."""
    while host.idle:
        conn = host.idle.pop()
        if not conn.closed:
            return conn
    return None


async def _roundtrip(conn: _Conn, raw: bytes, timeout: float) -> HopReply:
    try:
        return await conn.request(raw, timeout)
    except BaseException:
        conn.close()  # failed, cancelled or timed out mid-request: never reuse it
        raise

