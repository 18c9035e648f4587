"""``PgServer``: PostgreSQL wire connections on the node's asyncio loop.

The start of a connection is here: TLS (an ``SSLRequest`` answered ``S`` when the
server has an ``ssl.SSLContext``, and then required), a cancel request (process id +
secret -> that session's running statement, 57014), the bound on connections (53300),
and the password, which is a streamiq token checked by the ``authenticate`` callback
(28P01). The session that follows sees the views its token may read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import ssl
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from pygwire import PygwireError
from pygwire import messages as m

from streamiq.auth import Principal
from streamiq.errors import BadRequest, Overloaded, StreamiqError, Unauthenticated
from streamiq.serving.sql.catalog import Catalogs
from streamiq.serving.sql.duck import Duck
from streamiq.serving.sql.engine import Authenticate, Engine
from streamiq.serving.sql.execute import Executor, Limits
from streamiq.serving.sql.protocol import Wire, serve_queries
from streamiq.serving.sql.session import Session
from streamiq.serving.sql.settings import SERVER_PARAMETERS
from streamiq.serving.sql.stats import SqlStats

__all__ = ["PgServer"]

log = logging.getLogger("streamiq.sql")


class PgServer:
    def __init__(self, engine: Engine, authenticate: Authenticate, *,
                 tls: ssl.SSLContext | None = None, max_connections: int = 64,
                 limits: Limits | None = None, startup_timeout_s: float = 10.0,
                 statement_timeout_s: float = 300.0, max_message_bytes: int = 16 << 20
                 ) -> None:
        self.engine = engine
        self.authenticate = authenticate
        self.tls = tls
        self.max_connections = max_connections
        self.startup_timeout_s = startup_timeout_s
        self.statement_timeout_s = statement_timeout_s
        self.max_message_bytes = max_message_bytes
        self.duck = Duck()
        self.stats = SqlStats()
        self.executor = Executor(engine, self.duck, limits, self.stats)
        self.catalogs = Catalogs()
        self.sessions: dict[int, Session] = {}
        self._connections = 0  # past the connection bound's check (startup or session)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        """Listen; the port bound (``port`` 0: any free one)."""
        self._server = await asyncio.start_server(self._accept, host, port)
        bound: int = self._server.sockets[0].getsockname()[1]
        return bound

    def metrics(self) -> Iterator[Metric]:
        """For the node's /metrics: errors by SQLSTATE, and the sessions open."""
        yield from self.stats.metrics()
        yield GaugeMetricFamily("streamiq_sql_sessions", "SQL sessions open",
                                value=len(self.sessions))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        self.catalogs.close()
        self.duck.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        wire = Wire(reader, writer, self.max_message_bytes, self.stats)
        session: Session | None = None
        try:
            async with asyncio.timeout(self.startup_timeout_s):
                session = await self._startup(wire)
            if session is not None:
                await serve_queries(wire, session)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError, ssl.SSLError):
            pass
        except asyncio.CancelledError:
            pass  # close(): this connection task ends here (asyncio's stream callback
            # would log a cancelled client task as an error)
        except StreamiqError as exc:  # refused, or not the protocol: FATAL, then closed
            with contextlib.suppress(ConnectionError, PygwireError):
                wire.error(exc, fatal=True)
                await writer.drain()
        finally:
            if session is not None:
                self.sessions.pop(session.process_id, None)
            self._connections -= wire.counted
            self._tasks.discard(task)
            writer.close()

    async def _startup(self, wire: Wire) -> Session | None:
        msg = await wire.next()
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
        if self._connections >= self.max_connections:
            raise Overloaded("sorry, too many clients already",
                             max_connections=self.max_connections)
        self._connections += 1
        wire.counted = True
        principal, password = await self._password(wire, msg.params.get("user", ""))
        return await self._open(wire, principal, msg.params, password)

    async def _password(self, wire: Wire, user: str) -> tuple[Principal, str]:
        wire.send(m.AuthenticationCleartextPassword())
        await wire.writer.drain()
        reply = await wire.next()
        if not isinstance(reply, m.PasswordMessage):
            raise Unauthenticated("expected a password message")
        raw = reply.password
        password = (raw.decode() if isinstance(raw, bytes) else raw).rstrip("\x00")
        try:
            return await self.authenticate(user, password), password
        except Unauthenticated as exc:
            raise Unauthenticated(f'password authentication failed for user "{user}": '
                                  f"{exc.message}") from None

    async def _open(self, wire: Wire, principal: Principal, params: dict[str, str],
                    password: str) -> Session:
        views = list(await self.engine.views(principal))
        pid = secrets.randbelow(2**31 - 1) + 1
        while pid in self.sessions:
            pid = secrets.randbelow(2**31 - 1) + 1
        session = Session(principal, views, self.catalogs.of(views), self.executor, pid,
                          secrets.token_bytes(4), self.statement_timeout_s,
                          f"Bearer {password}" if password else None)
        self.sessions[pid] = session
        wire.send(m.AuthenticationOk())
        for name, value in {**SERVER_PARAMETERS,
                            "application_name": params.get("application_name", "")}.items():
            wire.send(m.ParameterStatus(name=name, value=value))
        wire.send(m.BackendKeyData(process_id=pid, secret_key=session.secret))
        wire.ready(False)
        await wire.writer.drain()
        return session

    def _cancel(self, msg: m.CancelRequest) -> None:
        session = self.sessions.get(msg.process_id)
        if session is not None and secrets.compare_digest(session.secret, msg.secret_key):
            session.cancel()
