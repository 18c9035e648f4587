"""The peer protocol's client: pooled keep-alive connections, one request at a time each.

The frames are ``serving/cluster/wire.py``'s: a preface and the cluster credential per
connection, then requests with their id and budget, replies with their id and status.
One client for every call to a peer: a forwarded lookup, a key's windows, each part of
a scatter-gather.

Why not an HTTP or gRPC client: bench/bench_queries.py measured a forwarded lookup at
~5x the server CPU of a local one through aiohttp (the node's HTTP client before this
one), most of it in the general-purpose client; bench/bench_peer_transport.py measured
grpc.aio at ~10x the wire's time per small call. A hop needs one frame on a pooled connection.

Failures are plain ``OSError`` subclasses (``ConnectionError`` when the connection was
refused or lost) or ``TimeoutError`` past the request's deadline:
``serving/cluster/peers.py`` maps both to ``PeerError`` in one place (``peer_error``). A
request on a reused idle connection that the server had already closed (nodes drop idle
connections after a few seconds) is retried once on a fresh connection: safe, because
every peer request reads and never writes.

Two ways to call it: ``await fetch(...)`` (connects or waits for a slot if it must),
and ``call(..., then)``, which only uses an idle pooled connection and reports the
reply (or the failure, without retrying) to a callback: no coroutine, no future. Either
may be given a hedge point: ``slow()`` runs once if no reply has come by then (the
caller asks another replica; this request goes on until its deadline).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from ssl import SSLContext
from typing import cast

from streamiq.serving.cluster.wire import PREFACE, REPLY, PeerReply, request_frame

__all__ = ["HopClient", "PeerReply"]

log = logging.getLogger("streamiq.routing")

_Settle = Callable[[PeerReply | None, Exception | None], None]
_MAX_REPLY = 1 << 31  # a reply announcing more than this is not one


class _Conn(asyncio.Protocol):
    """One connection to a peer; at most one request in flight."""

    def __init__(self, mark: bytes) -> None:
        self.transport: asyncio.Transport | None = None
        self.loop: asyncio.AbstractEventLoop | None = None  # its loop (no lookup per call)
        self.closed = False
        self._then: _Settle | None = None  # the request in flight, if any
        self._rid = 0
        self._got_bytes = False
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        self._slow: Callable[[], None] | None = None  # the hedge, once, at _hedge_at
        self._hedge_at = 0.0
        self._prefix = PREFACE + mark + b"\n"  # the credential, with the first request
        self._buf = bytearray()  # a big reply comes in many reads: appended, not re-copied
        self._need = -1  # the reply's whole size once its head is read
        self._host: _Host | None = None  # a pooled call's: its bookkeeping when settled

    # -- asyncio.Protocol --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        if not self._buf and self._need < 0 and len(data) >= REPLY.size:  # the usual: one read
            size, rid, status = REPLY.unpack_from(data)
            if len(data) == REPLY.size + size and rid == self._rid and self._then is not None:
                self._settle(PeerReply(status, data[REPLY.size:]), None)
                return
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
        buf = self._buf
        buf += data
        if self._need < 0:
            if len(buf) < REPLY.size:
                return
            size = REPLY.unpack_from(buf)[0]
            if size > _MAX_REPLY:
                raise ConnectionError(f"not a peer reply: {bytes(buf[:16])!r}")
            self._need = REPLY.size + size
        if len(buf) < self._need:
            return
        if len(buf) > self._need:
            raise ConnectionError("unexpected bytes after a peer reply")
        _, rid, status = REPLY.unpack_from(buf)
        body = bytes(memoryview(buf)[REPLY.size:])
        self._buf, self._need = bytearray(), -1
        self._settled(rid, status, body)

    def _settled(self, rid: int, status: int, body: bytes) -> None:
        if self._then is None or rid != self._rid:
            raise ConnectionError(f"a reply to request {rid}, not to {self._rid}")
        self._settle(PeerReply(status, body), None)

    # -- use --
    def _fail(self, exc: Exception) -> None:
        self._settle(None, exc)

    def _settle(self, reply: PeerReply | None, exc: Exception | None) -> None:
        then, self._then, self._slow = self._then, None, None
        host = self._host
        if host is None:  # a request of fetch's: its bookkeeping is fetch's
            if then is not None:
                then(reply, exc)
            return
        self._host = None  # a pooled call (HopClient.call): the connection goes back
        try:
            if then is not None:
                then(reply, exc)  # first: the answer is on its way before the bookkeeping
        except Exception:
            log.exception("peer reply handler failed")
        _release(host)
        if exc is None:
            host.answered += 1
            _checkin(host, self)
        else:
            self.close()

    def _check(self) -> None:
        """The timer: the hedge point, then the deadline, of the request in flight; it
        stays armed while requests keep coming (no timer per request)."""
        self._timer = None
        if self._then is None or self.closed:
            return
        loop = cast(asyncio.AbstractEventLoop, self.loop)
        now = loop.time()
        if now >= self._deadline:
            self._fail(TimeoutError("no reply from the peer within the budget"))
            self.close()  # a late reply must not wait in this connection
            return
        if self._slow is not None and now >= self._hedge_at:
            slow, self._slow = self._slow, None
            try:
                slow()
            except Exception:
                log.exception("hedging a slow peer failed")
        at = self._hedge_at if self._slow is not None else self._deadline
        self._timer = loop.call_at(at, self._check)

    def close(self) -> None:
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.close()

    def call(self, body: bytes, deadline: float, then: _Settle,
             slow: Callable[[], None] | None = None, hedge_at: float = 0.0) -> None:
        """Send one request; ``then(reply, None)`` or ``then(None, error)`` runs exactly
        once, from the event loop's callbacks; ``slow()`` at ``hedge_at`` if no reply
        came by then. The write is the last thing done here: on loopback it wakes the
        peer, which may then share this CPU until we yield it."""
        assert self.transport is not None and self._then is None
        loop = cast(asyncio.AbstractEventLoop, self.loop)
        now = loop.time()
        self._got_bytes = False
        self._then, self._slow, self._hedge_at = then, slow, hedge_at
        self._deadline = deadline
        first = hedge_at if slow is not None else deadline
        if self._timer is None or self._timer.when() > first:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(first, self._check)
        self._rid = (self._rid + 1) & 0xFFFFFFFF
        raw = request_frame(self._rid, int((deadline - now) * 1000), body)
        if self._prefix:
            raw, self._prefix = self._prefix + raw, b""
        self.transport.write(raw)

    def request(self, body: bytes, deadline: float, slow: Callable[[], None] | None = None,
                hedge_at: float = 0.0) -> asyncio.Future[PeerReply]:
        fut: asyncio.Future[PeerReply] = asyncio.get_running_loop().create_future()

        def then(reply: PeerReply | None, exc: Exception | None) -> None:
            if fut.done():
                return
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(cast(PeerReply, reply))

        self.call(body, deadline, then, slow, hedge_at)
        return fut

    @property
    def silent(self) -> bool:
        """True when the last request failed before the server sent a single byte."""
        return not self._got_bytes


class _Host:
    """One peer: idle connections, requests in flight,
    requests waiting for a slot."""

    __slots__ = ("address", "answered", "busy", "idle", "max_idle", "waiters")

    def __init__(self, address: str, max_idle: int) -> None:
        self.address = address
        self.max_idle = max_idle  # idle connections kept
        self.idle: list[_Conn] = []
        self.busy = 0
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.answered = 0  # requests that got a reply


class HopClient:
    """Pooled keep-alive requests to other nodes over the peer protocol.

    ``await fetch("host:port", body, deadline)`` is one request (``wire.request_body``).
    At most ``max_per_host`` requests per node are in flight (each on its own
    connection); further ones wait for a slot until their deadline. ``call`` is the same
    request on a callback, made only when a pooled connection and a slot are free right
    now (False otherwise).
    """

    def __init__(self, *, mark: bytes = b"1", ssl: SSLContext | None = None,
                 max_per_host: int = 64, max_idle_per_host: int = 32,
                 connect_timeout: float = 1.0) -> None:
        self._mark = mark  # the cluster credential (streamiq.auth.hop_mark)
        self._ssl = ssl  # TLS to peers (streamiq/tls.py), or plain TCP
        self._hosts: dict[str, _Host] = {}
        self._max_per_host = max_per_host  # connections in use; more requests queue
        self._max_idle = max_idle_per_host
        self._connect_timeout = connect_timeout

    def answered(self) -> int:
        """Replies received from every peer."""
        return sum(h.answered for h in self._hosts.values())

    def pool(self, address: str) -> dict[str, int]:
        """The connections to one peer: idle (pooled), busy (a request in flight), and
        requests waiting for a connection slot."""
        host = self._hosts.get(address)
        if host is None:
            return {"idle": 0, "busy": 0, "waiting": 0}
        return {"idle": len(host.idle), "busy": host.busy, "waiting": len(host.waiters)}

    def call(self, address: str, body: bytes, deadline: float,
             then: Callable[[PeerReply | None, Exception | None], None],
             slow: Callable[[], None] | None = None, hedge_at: float = 0.0) -> bool:
        """A request on an idle pooled connection, if one is free right now.

        True: ``then(reply, None)`` or ``then(None, error)`` will run from the event
        loop's callbacks (no retry here: a stale idle connection fails too, and the
        caller falls back to its slower path). False: nothing was sent; use ``fetch``.
        """
        host = self._hosts.get(address)
        if host is None or host.busy >= self._max_per_host:
            return False
        conn = _pooled(host)
        if conn is None:
            return False
        host.busy += 1
        conn._host = host  # settled: the slot released, the connection back in the pool
        conn.call(body, deadline, then, slow, hedge_at)
        return True

    async def fetch(self, address: str, body: bytes, deadline: float,
                    slow: Callable[[], None] | None = None, hedge_at: float = 0.0
                    ) -> PeerReply:
        """One request, connecting or waiting for a slot if it must, until ``deadline``
        (the event loop's time); ``TimeoutError`` past it."""
        host = self._host(address)
        loop = asyncio.get_running_loop()
        if deadline <= loop.time():
            raise TimeoutError("no budget left for the peer")
        async with asyncio.timeout_at(deadline):
            await self._acquire(host)
            try:
                return await self._get(host, body, deadline, slow, hedge_at)
            finally:
                _release(host)

    def _host(self, address: str) -> _Host:
        host = self._hosts.get(address)
        if host is None:
            host = self._hosts[address] = _Host(address, self._max_idle)
        return host

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
                _release(host)  # handed over just as we gave up: pass it on
            else:
                host.waiters.remove(slot)
            raise

    async def _get(self, host: _Host, body: bytes, deadline: float,
                   slow: Callable[[], None] | None, hedge_at: float) -> PeerReply:
        conn, reused = await self._checkout(host)
        try:
            reply = await _roundtrip(conn, body, deadline, slow, hedge_at)
        except ConnectionError:
            if not (reused and conn.silent):
                raise
            conn = await self._connect(host)  # a stale idle connection: once more
            reply = await _roundtrip(conn, body, deadline, slow, hedge_at)
        host.answered += 1
        _checkin(host, conn)
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
                lambda: _Conn(self._mark), name, int(port), ssl=self._ssl,
                server_hostname=name if self._ssl else None)
        return conn

    def close(self) -> None:
        for host in self._hosts.values():
            for conn in host.idle:
                conn.close()
            host.idle.clear()


def _release(host: _Host) -> None:
    """A request's slot: to the first request waiting for one, else free."""
    while host.waiters:
        slot = host.waiters.popleft()
        if not slot.done():
            slot.set_result(None)
            return
    host.busy -= 1


def _checkin(host: _Host, conn: _Conn) -> None:
    """A connection whose request is done: kept idle (up to ``max_idle``) or closed."""
    if conn.closed:
        return
    if len(host.idle) < host.max_idle:
        host.idle.append(conn)
    else:
        conn.close()


def _pooled(host: _Host) -> _Conn | None:
    """The most recently used idle connection still open (closed ones are dropped)."""
    while host.idle:
        conn = host.idle.pop()
        if not conn.closed:
            return conn
    return None


async def _roundtrip(conn: _Conn, body: bytes, deadline: float,
                     slow: Callable[[], None] | None, hedge_at: float) -> PeerReply:
    try:
        return await conn.request(body, deadline, slow, hedge_at)
    except BaseException:
        conn.close()  # failed, cancelled or timed out mid-request: never reuse it
        raise
