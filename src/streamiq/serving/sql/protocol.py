"""The query phase of a connection: simple and extended protocol as PostgreSQL's
message flow has them, frames read by pygwire's decoder, answers encoded by ``codecs``
(text or binary, per column as the client asks).

Every message is answered in order; a simple Query is one even between an extended
batch's messages and its Sync (asyncpg sends one after Parse/Describe/Flush). After an
error the connection stays usable: a simple query ends with ReadyForQuery; in the
extended protocol every message up to the next Sync is skipped, as PostgreSQL does.
Portals are read ``max_rows`` at a time, cursors by FETCH (``portals``); COPY TO STDOUT
answers CopyData (``copyout``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pygwire import PygwireError, TransactionStatus
from pygwire import messages as m
from pygwire.codec import FrontendMessageDecoder
from pygwire.constants import ConnectionPhase

from streamiq._sqlstate import error_fields
from streamiq.errors import BadRequest, PayloadTooLarge, StreamiqError
from streamiq.serving.sql.catalog import Schema
from streamiq.serving.sql.codecs import decode_params, format_of, row_encoder
from streamiq.serving.sql.copyout import CopyOut
from streamiq.serving.sql.duck import Answer
from streamiq.serving.sql.portals import Portal, Portals
from streamiq.serving.sql.session import INLINE_SPLIT, Prepared, Session, SessionEnded
from streamiq.serving.sql.split import split_statements
from streamiq.serving.sql.stats import SqlStats
from streamiq.serving.sql.types import TEXT_OID, oid_of

__all__ = ["Wire", "serve_queries", "split_statements"]

log = logging.getLogger("streamiq.sql")

_FLUSH_ROWS = 512  # DataRows written between drains
#: the decoder's framing after the server sends these (the rest of the time: as is)
_PHASE_AFTER: dict[type[m.PGMessage], ConnectionPhase] = {
    m.AuthenticationCleartextPassword: ConnectionPhase.AUTHENTICATING,
    m.AuthenticationOk: ConnectionPhase.READY}


class Wire:
    """A connection's framing: pygwire's decoder between bytes and messages (its
    framing only: the message flow is PostgreSQL's, kept here and in ``server``). A
    message longer than ``max_message_bytes`` and bytes that are not the protocol are
    ``BadRequest`` (the server answers FATAL and closes)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 max_message_bytes: int = 16 << 20, stats: SqlStats | None = None) -> None:
        self.decoder = FrontendMessageDecoder()
        self.stats = stats
        self.reader = reader
        self.writer = writer
        self.max_message_bytes = max_message_bytes
        self.counted = False  # holds one of the server's connection slots

    async def next(self) -> m.PGMessage:
        while True:
            try:
                msg = next(self.decoder, None)
            except PygwireError as exc:
                raise BadRequest(f"not the PostgreSQL protocol: {exc}") from None
            if msg is not None:
                self._expected(msg)
                if self._too_long(msg):
                    raise self._too_large()
                return msg
            if self.decoder.buffered > self.max_message_bytes:
                raise self._too_large()
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("the client closed the connection")
            self.decoder.feed(data)

    def _expected(self, msg: m.PGMessage) -> None:
        """While a password is asked, only it (or Terminate) is the protocol."""
        if self.decoder.phase == ConnectionPhase.AUTHENTICATING \
                and not isinstance(msg, m.PasswordMessage | m.Terminate):
            raise BadRequest("not the PostgreSQL protocol: expected a password message, got "
                             f"{type(msg).__name__}")

    def _too_large(self) -> PayloadTooLarge:
        return PayloadTooLarge(f"a message of more than {self.max_message_bytes} bytes "
                               "(--sql-max-statement-bytes): refused before it is parsed")

    def _too_long(self, msg: m.PGMessage) -> bool:
        """A statement that came whole in one read, longer than the bound."""
        text = msg.query_string if isinstance(msg, m.Query) else (
            msg.query if isinstance(msg, m.Parse) else "")
        return len(text) > self.max_message_bytes

    def send(self, msg: m.PGMessage) -> None:
        phase = _PHASE_AFTER.get(type(msg))
        if phase is not None:
            self.decoder.phase = phase
        self.writer.write(msg.to_wire())

    def error(self, exc: StreamiqError, *, fatal: bool = False) -> None:
        if self.stats is not None:
            self.stats.error(exc, fatal=fatal)
        self.send(m.ErrorResponse(fields=error_fields(exc, fatal=fatal)))

    def ready(self, in_transaction: bool) -> None:
        self.send(m.ReadyForQuery(status=TransactionStatus.IN_TRANSACTION if in_transaction
                                  else TransactionStatus.IDLE))


@dataclass
class _Copied(Answer):
    """A COPY's rows, sent as CopyData in ``copy``'s format."""

    copy: CopyOut | None = None


def _rows_of(answer: Answer) -> Schema | None:
    if isinstance(answer, _Copied):
        return None  # a COPY has no row description (its rows go as CopyData)
    return None if answer.rows is None else tuple(zip(answer.names, answer.types,
                                                      strict=True))


@dataclass
class _Loop:
    wire: Wire
    session: Session
    statements: dict[str, tuple[Prepared, list[int]]] = field(default_factory=dict)
    portals: Portals = field(default_factory=Portals)

    def describe_rows(self, schema: Schema | None, formats: Sequence[int]) -> None:
        if schema is None:
            self.wire.send(m.NoData())
            return
        self.wire.send(m.RowDescription(fields=[m.FieldDescription(
            name=name, type_oid=oid_of(duck), type_size=-1, type_modifier=-1,
            format_code=format_of(formats, i)) for i, (name, duck) in enumerate(schema)]))

    async def send_rows(self, answer: Answer, rows: Sequence[tuple[Any, ...]],
                        formats: Sequence[int]) -> None:
        encoder = row_encoder(answer.types, formats)
        for n, row in enumerate(rows, 1):
            self.wire.send(m.DataRow(columns=encoder.encode(row)))
            if n % _FLUSH_ROWS == 0:
                await self.wire.writer.drain()

    def notices(self, answer: Answer) -> None:
        for notice in answer.notices:
            self.wire.send(m.NoticeResponse(fields={"S": "NOTICE", "V": "NOTICE",
                                                    "C": "01000", "M": notice}))
        answer.notices.clear()

    async def send_copy(self, answer: _Copied) -> None:
        assert answer.copy is not None and answer.rows is not None
        self.notices(answer)
        self.wire.send(m.CopyOutResponse(overall_format=0, col_formats=[0] * len(answer.types)))
        for n, line in enumerate(answer.copy.lines(answer.names, answer.types, answer.rows), 1):
            self.wire.send(m.CopyData(data=line))
            if n % _FLUSH_ROWS == 0:
                await self.wire.writer.drain()
        self.wire.send(m.CopyDone())
        self.wire.send(m.CommandComplete(tag=f"COPY {len(answer.rows)}"))

    async def send_answer(self, answer: Answer, rows: Sequence[tuple[Any, ...]] | None,
                          formats: Sequence[int], suspended: bool = False) -> None:
        if isinstance(answer, _Copied):
            await self.send_copy(answer)
            return
        self.notices(answer)
        if answer.rows is None or rows is None:
            self.wire.send(m.CommandComplete(tag=answer.tag))
            return
        await self.send_rows(answer, rows, formats)
        if suspended:
            self.wire.send(m.PortalSuspended())
        else:
            self.wire.send(m.CommandComplete(
                tag=f"SELECT {len(rows)}" if answer.tag == "SELECT" else answer.tag))

    async def run(self, prepared: Prepared, values: Sequence[Any]) -> Answer:
        """Run a statement: a query or command through the session, a cursor command
        on the portals. The end of a transaction drops its portals."""
        was = self.session.settings.in_transaction
        answer = await self._run(prepared, values)
        if was and not self.session.settings.in_transaction:
            self.portals.end_of_transaction()
        return answer

    async def _run(self, prepared: Prepared, values: Sequence[Any]) -> Answer:
        c = prepared.cursor
        if prepared.copy is not None:
            got = await self.session.execute(prepared, values)
            return _Copied(got.names, got.types, got.rows, "COPY", got.notices, prepared.copy)
        if c is None:
            return await self.session.execute(prepared, values)
        if c.kind == "DECLARE":
            assert c.name is not None
            if not c.hold and not self.session.settings.in_transaction:
                raise BadRequest("DECLARE CURSOR can only be used in transaction blocks "
                                 "(BEGIN first, or declare it WITH HOLD)")
            answer = await self.session.execute(prepared, values)
            self.portals.add(c.name, Portal(prepared, list(values), [], answer, hold=c.hold,
                                            cursor=True))
            return Answer.command("DECLARE CURSOR")
        if c.kind == "CLOSE":
            self.portals.close(c.name)
            return Answer.command("CLOSE CURSOR")
        assert c.name is not None
        cursor = self.portals.cursor(c.name)
        assert cursor.answer is not None
        rows = cursor.take(c.count)
        if c.kind == "MOVE":
            return Answer.command(f"MOVE {len(rows)}")
        return replace(cursor.answer, rows=rows, tag=f"FETCH {len(rows)}", notices=[])

    async def simple(self, text: str) -> None:
        statements = (split_statements(text) if len(text) <= INLINE_SPLIT
                      else await self.session.split(text))  # a long one: in a SQL worker
        if not statements:
            self.wire.send(m.EmptyQueryResponse())
        for sql in statements:  # the first error ends the whole query string
            answer = await self.run(await self.session.prepare(sql), [])
            if answer.rows is not None and not isinstance(answer, _Copied):
                self.describe_rows(_rows_of(answer), [])
            await self.send_answer(answer, answer.rows, [])

    async def extended(self, msg: m.PGMessage) -> None:
        if isinstance(msg, m.Parse):
            prepared = await self.session.prepare(msg.query.strip().rstrip(";"))
            self.session.may_keep(msg.statement, prepared, self.statements)  # bounded
            self.statements[msg.statement] = (prepared, list(msg.param_types))
            self.wire.send(m.ParseComplete())
        elif isinstance(msg, m.Bind):
            self.bind(msg)
            self.wire.send(m.BindComplete())
        elif isinstance(msg, m.Describe):
            await self.describe(msg)
        elif isinstance(msg, m.Execute):
            await self.execute(msg)
        elif isinstance(msg, m.Close):
            if msg.kind == "S":
                self.statements.pop(msg.name, None)
            else:
                self.portals.by_name.pop(msg.name, None)
            self.wire.send(m.CloseComplete())

    def _statement(self, name: str) -> tuple[Prepared, list[int]]:
        if name not in self.statements:
            raise BadRequest(f'prepared statement "{name}" does not exist')
        return self.statements[name]

    @staticmethod
    def param_oids(prepared: Prepared, given: Sequence[int]) -> list[int]:
        """Each parameter's type: the client's where it gave one, else inferred."""
        count = max(prepared.params, len(given))
        inferred = prepared.param_types
        return [(given[i] if i < len(given) and given[i] else 0)
                or (inferred[i] if i < len(inferred) else TEXT_OID) for i in range(count)]

    def bind(self, msg: m.Bind) -> None:
        prepared, given = self._statement(msg.statement)
        values = decode_params(msg.param_values, msg.param_formats,
                               self.param_oids(prepared, given))
        portal = Portal(prepared, values, list(msg.result_formats))
        self.portals.by_name[msg.portal] = portal

    async def describe(self, msg: m.Describe) -> None:
        if msg.kind == "S":
            prepared, given = self._statement(msg.name)
            self.wire.send(m.ParameterDescription(type_oids=self.param_oids(prepared,
                                                                            given)))
            self.describe_rows(await self._statement_rows(prepared), [])
            return
        portal = self.portals.get(msg.name)  # run now, sent at Execute (never run twice)
        if portal.answer is None:
            portal.answer = await self.run(portal.run, portal.values)
        self.describe_rows(_rows_of(portal.answer), portal.formats)

    async def _statement_rows(self, prepared: Prepared) -> Schema | None:
        c = prepared.cursor
        if prepared.copy is not None:
            return None
        if c is None:
            return await self.session.describe(prepared)
        if c.kind == "FETCH" and c.name is not None:
            answer = self.portals.cursor(c.name).answer
            return None if answer is None else _rows_of(answer)
        return None

    async def execute(self, msg: m.Execute) -> None:
        portal = self.portals.get(msg.portal)
        if portal.answer is None:
            portal.answer = await self.run(portal.run, portal.values)
        answer = portal.answer
        if answer.rows is None or isinstance(answer, _Copied):
            await self.send_answer(answer, None, portal.formats)
            return
        rows = portal.take(msg.max_rows)
        await self.send_answer(answer, rows, portal.formats,
                               suspended=msg.max_rows > 0 and not portal.done)

    def sync(self) -> None:
        self.portals.by_name.pop("", None)
        if not self.session.settings.in_transaction:
            self.portals.end_of_transaction()


async def serve_queries(wire: Wire, session: Session) -> None:
    """Answer the client's messages until it terminates or goes away."""
    loop = _Loop(wire, session)
    skipping = False  # extended protocol, after an error: discard until Sync
    while True:
        msg = await wire.next()
        if isinstance(msg, m.Terminate):
            return
        if isinstance(msg, m.Sync):
            skipping = False
            loop.sync()
            wire.ready(session.settings.in_transaction)
        elif skipping or isinstance(msg, m.Flush):
            pass
        elif isinstance(msg, m.Query):
            await _answering(wire, loop.simple(msg.query_string))
            loop.sync()
            wire.ready(session.settings.in_transaction)
        else:
            skipping = not await _answering(wire, loop.extended(msg))
        await wire.writer.drain()


async def _answering(wire: Wire, step: Coroutine[Any, Any, None]) -> bool:
    """Run one step; an error becomes an ErrorResponse (False), never a closed
    connection (a bug is logged and answered XX000)."""
    try:
        await step
        return True
    except SessionEnded:
        raise  # the server answers it FATAL and closes the connection
    except StreamiqError as exc:
        wire.error(exc)
    except Exception as exc:
        log.exception("SQL: unexpected error")
        wire.error(StreamiqError(f"internal error: {type(exc).__name__}"))
    return False
