"""A minimal keep-alive HTTP/1.1 client for the node-to-node hop of a key lookup.

Why not aiohttp here: bench/bench_queries.py measured a forwarded lookup at ~5x the
server CPU of a local one, most of it in the general-purpose client on the entry node
(request building, cookie and redirect handling, response objects, timers). A key
lookup hop needs none of that: one GET on a pooled connection, the reply parsed by
httptools (the parser uvicorn already uses) in ``data_received``.

Failures are plain ``OSError`` subclasses (``ConnectionError`` when the connection was
refused or lost) or ``asyncio.TimeoutError``, so callers can treat them like any other
transport error. A request on a reused idle connection that the server had already
closed (uvicorn drops idle keep-alive connections after a few seconds) is retried once
on a fresh connection: safe, because only idempotent GETs go through here.

Two ways to call it: ``await get(...)`` (connects or waits for a slot if it must), and
``send(..., then)``, which only uses an idle pooled connection and reports the reply
(or None on any failure, without retrying) to a callback: no coroutine, no future.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import httptools

__all__ = ["HopClient", "HopReply"]

log = logging.getLogger("streamiq.routing")


@dataclass(frozen=True, slots=True)
class HopReply:
    status: int
    headers: dict[bytes, bytes]  # lower-case names, raw bytes (relayed as they came)
    body: bytes


_Settle = Callable[[HopReply | None, Exception | None], None]


class _Conn(asyncio.Protocol):
    """One connection; at most one request in flight."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._then: _Settle | None = None  # the request in flight, if any
        self._headers: dict[bytes, bytes] = {}
        self._body: list[bytes] = []
        self._got_bytes = False
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._got_bytes = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"malformed HTTP reply: {exc}"))
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionResetError("connection closed by the peer")
                   if exc is None else ConnectionResetError(str(exc)))

    # -- httptools callbacks --
    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.lower()] = value

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        reply = HopReply(self._parser.get_status_code(), self._headers, b"".join(self._body))
        if not self._parser.should_keep_alive():
            self.close()
        self._settle(reply, None)

    # -- use --
    def _fail(self, exc: Exception) -> None:
        self._settle(None, exc)

    def _settle(self, reply: HopReply | None, exc: Exception | None) -> None:
        self._disarm()
        then, self._then = self._then, None
        if then is not None:
            then(reply, exc)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _time_out(self) -> None:
        self._timer = None
        self._fail(TimeoutError("no reply from the peer in time"))
        self.close()  # a late reply must not be read as the next request's

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def call(self, raw: bytes, timeout: float, then: _Settle) -> None:
        """Send one request; ``then(reply, None)`` or ``then(None, error)`` runs exactly
        once, from the event loop's callbacks. The write is the last thing done here: on
        loopback it wakes the peer, which may then share this CPU until we yield it."""
        assert self.transport is not None and self._then is None
        self._headers, self._body, self._got_bytes = {}, [], False
        self._then = then
        self._timer = asyncio.get_running_loop().call_later(timeout, self._time_out)
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


class _Host:
    """One peer: idle connections, requests in flight, requests waiting for a slot."""

    __slots__ = ("busy", "idle", "waiters")

    def __init__(self) -> None:
        self.idle: list[_Conn] = []
        self.busy = 0
        self.waiters: deque[asyncio.Future[None]] = deque()


class HopClient:
    """Pooled keep-alive GETs: ``await client.get("host:port", "/path", headers)``.

    At most ``max_per_host`` requests per node are in flight (each on its own
    connection); further ones wait for a slot within their timeout. ``send`` is the
    same request on callbacks, made only when a pooled connection and a slot are free
    right now (False otherwise: then use ``get``).
    """

    def __init__(self, *, max_per_host: int = 64, max_idle_per_host: int = 32,
                 connect_timeout: float = 1.0) -> None:
        self._hosts: dict[str, _Host] = {}
        self._max_per_host = max_per_host  # connections in use; more requests queue
        self._max_idle = max_idle_per_host
        self._connect_timeout = connect_timeout

    def send(self, address: str, path: str, headers: dict[str, str],
             then: Callable[[HopReply | None], None], timeout: float = 10.0) -> bool:
        """The request on an idle pooled connection, if one is free right now.

        True: ``then(reply)`` will run from the event loop's callbacks, ``then(None)``
        if the request failed (no retry here: a stale idle connection fails too, and
        the caller falls back to its slower path). False: nothing was sent; use ``get``.
        """
        host = self._hosts.get(address)
        if host is None or host.busy >= self._max_per_host:
            return False
        conn = _pooled(host)
        if conn is None:
            return False
        host.busy += 1

        def settled(reply: HopReply | None, exc: Exception | None) -> None:
            self._release(host)
            if exc is None:
                self._checkin(host, conn)
            else:
                conn.close()
            try:
                then(reply)
            except Exception:
                log.exception("hop reply handler failed")

        conn.call(_request(address, path, headers), timeout, settled)
        return True

    async def get(self, address: str, path: str, headers: dict[str, str],
                  timeout: float = 10.0) -> HopReply:
        raw = _request(address, path, headers)
        host = self._hosts.get(address)
        if host is None:
            host = self._hosts[address] = _Host()
        async with asyncio.timeout(timeout):
            await self._acquire(host)
            try:
                return await self._get(host, address, raw, timeout)
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

    async def _get(self, host: _Host, address: str, raw: bytes, timeout: float) -> HopReply:
        conn, reused = await self._checkout(host, address)
        try:
            reply = await _roundtrip(conn, raw, timeout)
        except ConnectionError:
            if not (reused and conn.silent):
                raise
            conn = await self._connect(address)  # a stale idle connection: once more
            reply = await _roundtrip(conn, raw, timeout)
        self._checkin(host, conn)
        return reply

    async def _checkout(self, host: _Host, address: str) -> tuple[_Conn, bool]:
        conn = _pooled(host)
        if conn is not None:
            return conn, True
        return await self._connect(address), False

    async def _connect(self, address: str) -> _Conn:
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(self._connect_timeout):
            _, conn = await loop.create_connection(_Conn, host, int(port))
        return conn

    def _checkin(self, host: _Host, conn: _Conn) -> None:
        if conn.closed:
            return
        if len(host.idle) < self._max_idle:
            host.idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        for host in self._hosts.values():
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


def _request(address: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"GET {path} HTTP/1.1", f"host: {address}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
