"""``PgServer``: PostgreSQL wire connections on the node's asyncio loop.

The start of a connection is here: TLS (an ``SSLRequest`` answered ``S`` when the
server has an ``ssl.SSLContext``, and then required), a cancel request (process id +
secret -> that session's running statement, 57014), and the password, which is a
streamiq token checked by the ``authenticate`` callback (28P01). The session that
follows sees the views its token may read. What no client can take from the others:

* **Slots.** A connection holds one of ``max_connections`` session slots only once its
  token is checked (53300 past it, or past ``max_per_address`` from one address).
  Until then it is one of at most ``max_startups`` startups (``admission.py``: a
  quarter of them per address, each given ``startup_timeout_s``): a newcomer past
  either bound closes the oldest startup that has not answered its password request,
  never one that has, so neither connections that never send a password nor a flood
  from the client's own address keep out a client that answers promptly.
* **Time.** A session that runs nothing for ``idle_timeout_s`` is closed (57P05); a
  statement runs at most ``statement_timeout_s`` (57014); a message longer than
  ``max_message_bytes`` is refused before it is parsed (54000) and its connection
  closed.
* **Work.** Parsing, planning and DuckDB run in the SQL workers (``pool.py``), never on
  this loop or the node's threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import ssl
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import partial

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from pygwire import PygwireError
from pygwire import messages as m

from streamiq.auth import Principal
from streamiq.errors import (
    BadRequest,
    Overloaded,
    RequestTimeout,
    StreamiqError,
    Unauthenticated,
)
from streamiq.serving.sql.admission import Startup, Startups, fd_room
from streamiq.serving.sql.engine import Authenticate, Engine
from streamiq.serving.sql.execute import Executor, Limits
from streamiq.serving.sql.pool import SqlWorkers
from streamiq.serving.sql.protocol import Wire, serve_queries
from streamiq.serving.sql.remote import RemoteCatalogs
from streamiq.serving.sql.session import Session, SessionEnded
from streamiq.serving.sql.settings import SERVER_PARAMETERS
from streamiq.serving.sql.stats import SqlStats

__all__ = ["PgServer", "ServerBounds"]

log = logging.getLogger("streamiq.sql")


@dataclass(frozen=True)
class ServerBounds:
    """What the server holds for its clients at once, and for how long."""

    max_connections: int = 64  # authenticated sessions
    max_per_address: int = 16  # authenticated sessions from one address
    max_startups: int = 1024  # connections not authenticated yet (a few KiB each)
    startup_timeout_s: float = 10.0
    idle_timeout_s: float = 900.0  # 0: sessions are never closed for idling
    statement_timeout_s: float = 30.0
    max_message_bytes: int = (1 << 20) + 1024
    max_in_list: int = 10_000

    @property
    def startups_per_address(self) -> int:
        return max(1, self.max_startups // 4)


class PgServer:
    def __init__(self, engine: Engine, authenticate: Authenticate, *,
                 tls: ssl.SSLContext | None = None, bounds: ServerBounds | None = None,
                 limits: Limits | None = None, workers: SqlWorkers | None = None) -> None:
        self.engine = engine
        self.authenticate = authenticate
        self.tls = tls
        self.bounds = bounds or ServerBounds()
        self.stats = SqlStats()
        self.workers = workers or SqlWorkers()
        self.executor = Executor(engine, self.workers, limits, self.stats)
        self.catalogs = RemoteCatalogs(self.workers)
        self.sessions: dict[int, Session] = {}
        self._by_address: Counter[str] = Counter()  # sessions per client address
        self._startups = Startups(self.bounds.max_startups, self.bounds.startups_per_address)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        """Listen; the port bound (``port`` 0: any free one)."""
        b = self.bounds = replace(self.bounds, max_startups=fd_room(
            self.bounds.max_startups, self.bounds.max_connections))
        self._startups = Startups(b.max_startups, b.startups_per_address)
        await self.workers.start()
        self._server = await asyncio.start_server(self._accept, host, port)
        bound: int = self._server.sockets[0].getsockname()[1]
        return bound

    def metrics(self) -> Iterator[Metric]:
        """For the node's /metrics: errors by SQLSTATE, the sessions open and the
        SQL workers."""
        yield from self.stats.metrics()
        yield GaugeMetricFamily("streamiq_sql_sessions", "SQL sessions open",
                                value=len(self.sessions))
        yield GaugeMetricFamily("streamiq_sql_startups", "SQL connections authenticating",
                                value=len(self._startups))
        yield CounterMetricFamily("streamiq_sql_startups_evicted", "SQL connections closed "
                                  "before answering their password request, to make room "
                                  "for newer ones (--sql-max-startups)",
                                  value=self._startups.evicted)
        yield GaugeMetricFamily("streamiq_sql_workers", "SQL worker processes running",
                                value=len(self.workers.pids))
        yield GaugeMetricFamily("streamiq_sql_waiting", "SQL requests waiting for a "
                                "worker", value=self.workers.waiting)
        yield CounterMetricFamily("streamiq_sql_workers_replaced", "SQL workers replaced: "
                                  "stopped past their memory share, ended, or holding more "
                                  "than half of it after a request",
                                  value=self.workers.replaced)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        await self.workers.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        wire = Wire(reader, writer, self.bounds.max_message_bytes, self.stats)
        address = _address(wire)
        session: Session | None = None
        startup: Startup | None = None
        try:
            try:
                startup = self._startups.admit(address, partial(self._evict, wire))
                async with asyncio.timeout(self.bounds.startup_timeout_s):
                    session = await self._startup(wire, address, startup)
            finally:
                if startup is not None:
                    self._startups.done(startup)
            if session is not None:
                await self._serve(wire, session)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass  # close(): this connection task ends here (asyncio's stream callback
            # would log a cancelled client task as an error)
        except SessionEnded as exc:
            await self._fatal(wire, exc.error)
        except StreamiqError as exc:  # refused, or not the protocol: FATAL, then closed
            await self._fatal(wire, exc)
        finally:
            if session is not None:
                self.sessions.pop(session.process_id, None)
                self._by_address[address] -= 1
                if self._by_address[address] <= 0:
                    del self._by_address[address]
            self._tasks.discard(task)
            writer.close()

    @staticmethod
    async def _fatal(wire: Wire, exc: StreamiqError) -> None:
        with contextlib.suppress(ConnectionError, PygwireError, RuntimeError):
            wire.error(exc, fatal=True)
            await wire.writer.drain()

    @staticmethod
    def _evict(wire: Wire, error: Overloaded) -> None:
        """Close a startup to make room for a newer one (``Startups``)."""
        with contextlib.suppress(ConnectionError, PygwireError, RuntimeError):
            wire.error(error, fatal=True)
        wire.writer.close()

    async def _startup(self, wire: Wire, address: str, startup: Startup) -> Session | None:
        msg = await wire.next()
        startup.started = True
        if isinstance(msg, m.GSSEncRequest):
            wire.send(m.GSSResponse(accepted=False))
            msg = await wire.next()
        if isinstance(msg, m.SSLRequest):
            wire.send(m.SSLResponse(accepted=self.tls is not None))
            await wire.writer.drain()
            if self.tls is not None:
                await wire.writer.start_tls(self.tls)
            msg = await wire.next()
        if isinstance(msg, m.CancelRequest):
            self._cancel(msg)
            return None
        if not isinstance(msg, m.StartupMessage):
            raise BadRequest(f"expected a startup message, got {type(msg).__name__}")
        if self.tls is not None and wire.writer.get_extra_info("ssl_object") is None:
            raise Unauthenticated("this server requires TLS (sslmode=require)")
        user = msg.params.get("user", "")
        principal, password = await self._password(wire, user, startup)
        self._take_slot(address)
        return await self._open(wire, principal, msg.params, user, password)

    def _take_slot(self, address: str) -> None:
        """A session slot for an authenticated connection (53300 when none is left)."""
        b = self.bounds
        if len(self.sessions) >= b.max_connections:
            raise Overloaded("sorry, too many clients already",
                             max_connections=b.max_connections)
        if self._by_address[address] >= b.max_per_address:
            raise Overloaded(f"sorry, too many clients already from {address}",
                             max_per_address=b.max_per_address)

    async def _password(self, wire: Wire, user: str,
                        startup: Startup) -> tuple[Principal, str]:
        wire.send(m.AuthenticationCleartextPassword())
        await wire.writer.drain()
        reply = await wire.next()
        if not isinstance(reply, m.PasswordMessage):
            raise Unauthenticated("expected a password message")
        startup.answered = True  # being checked: never closed to make room for another
        raw = reply.password
        password = (raw.decode() if isinstance(raw, bytes) else raw).rstrip("\x00")
        try:
            return await self.authenticate(user, password), password
        except Unauthenticated as exc:
            raise Unauthenticated(f'password authentication failed for user "{user}": '
                                  f"{exc.message}") from None

    async def _open(self, wire: Wire, principal: Principal, params: dict[str, str], user: str,
                    password: str) -> Session:
        views = list(await self.engine.views(principal))
        pid = secrets.randbelow(2**31 - 1) + 1
        while pid in self.sessions:
            pid = secrets.randbelow(2**31 - 1) + 1

        async def recheck() -> Principal:
            return await self.authenticate(user, password)

        session = Session(principal, views, self.catalogs.of(views), self.executor, pid,
                          secrets.token_bytes(4), self.bounds.statement_timeout_s,
                          f"Bearer {password}" if password else None, recheck=recheck,
                          max_in_list=self.bounds.max_in_list)
        self.sessions[pid] = session
        self._by_address[_address(wire)] += 1
        wire.send(m.AuthenticationOk())
        for name, value in {**SERVER_PARAMETERS,
                            "application_name": params.get("application_name", "")}.items():
            wire.send(m.ParameterStatus(name=name, value=value))
        wire.send(m.BackendKeyData(process_id=pid, secret_key=session.secret))
        wire.ready(False)
        await wire.writer.drain()
        return session

    async def _serve(self, wire: Wire, session: Session) -> None:
        """The session's queries, until the client leaves or idles past the bound."""
        idle = self.bounds.idle_timeout_s
        if not idle:
            await serve_queries(wire, session)
            return
        serving = asyncio.ensure_future(serve_queries(wire, session))
        try:
            while not serving.done():
                since = session.idle_since
                await asyncio.wait([serving], timeout=max(
                    0.05, idle if since is None else since + idle - time.monotonic()))
                since = session.idle_since
                if not serving.done() and since is not None and (
                        time.monotonic() - since >= idle):
                    serving.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await serving
                    raise RequestTimeout(f"terminating connection due to idle-session "
                                         f"timeout ({idle:g} s, --sql-idle-timeout-s)")
        except asyncio.CancelledError:
            serving.cancel()
            raise
        await serving  # its error, if it ended with one

    def _cancel(self, msg: m.CancelRequest) -> None:
        session = self.sessions.get(msg.process_id)
        if session is not None and secrets.compare_digest(session.secret, msg.secret_key):
            session.cancel()


def _address(wire: Wire) -> str:
    """The client's address (a Unix socket's: ``local``)."""
    peer = wire.writer.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else "local"
