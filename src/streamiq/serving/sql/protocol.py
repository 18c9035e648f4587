"""The query phase of a connection: simple and extended protocol, messages framed by
pygwire (``BackendConnection``), answers encoded here (text, or binary where asked).

After an error the connection stays usable: a simple query ends with ReadyForQuery; in
the extended protocol every message up to the next Sync is skipped, as PostgreSQL does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from pygwire import BackendConnection, PygwireError, TransactionStatus
from pygwire import messages as m

from streamiq._sqlstate import error_fields
from streamiq.errors import BadRequest, PayloadTooLarge, StreamiqError
from streamiq.serving.sql.catalog import Schema
from streamiq.serving.sql.duck import Answer
from streamiq.serving.sql.session import INLINE_SPLIT, Prepared, Session, SessionEnded
from streamiq.serving.sql.stats import SqlStats
from streamiq.serving.sql.types import binary_encoder, decode_param, encode_text, oid_of

__all__ = ["Wire", "serve_queries", "split_statements"]

log = logging.getLogger("streamiq.sql")

_FLUSH_ROWS = 512  # DataRows written between drains


@dataclass
class _Portal:
    prepared: Prepared
    values: list[Any]
    formats: list[int]
    answer: Answer | None = None  # run at Describe, sent at Execute


def split_statements(text: str) -> list[str]:
    """A simple query's statements (split at ``;`` outside quotes and comments)."""
    out: list[str] = []
    start, quote, i = 0, "", 0
    while i < len(text):
        ch = text[i]
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif text.startswith("--", i):  # a comment to the end of the line
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        elif ch == ";":
            out.append(text[start:i])
            start = i + 1
        i += 1
    out.append(text[start:])
    return [s.strip() for s in out if s.strip()]


def _format(formats: list[int], i: int) -> int:
    return formats[i] if len(formats) > 1 else (formats[0] if formats else 0)


class Wire:
    """A connection's framing: pygwire's state machine between bytes and messages. A
    message longer than ``max_message_bytes`` and bytes that are not the protocol are
    ``BadRequest`` (the server answers FATAL and closes)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 max_message_bytes: int = 16 << 20, stats: SqlStats | None = None) -> None:
        self.conn = BackendConnection()
        self.stats = stats
        self.reader = reader
        self.writer = writer
        self.max_message_bytes = max_message_bytes
        self._pending: list[m.PGMessage] = []
        self._partial = 0  # bytes received towards a message not complete yet
        self.counted = False  # holds one of the server's connection slots

    async def next(self) -> m.PGMessage:
        while not self._pending:
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("the client closed the connection")
            try:
                self._pending.extend(self.conn.receive(data))
            except PygwireError as exc:
                raise BadRequest(f"not the PostgreSQL protocol: {exc}") from None
            self._partial = 0 if self._pending else self._partial + len(data)
            if self._partial > self.max_message_bytes or any(map(self._too_long, self._pending)):
                raise PayloadTooLarge(f"a message of more than {self.max_message_bytes} "
                                      "bytes (--sql-max-statement-bytes): refused before "
                                      "it is parsed")
        return self._pending.pop(0)

    def _too_long(self, msg: m.PGMessage) -> bool:
        """A statement that came whole in one read, longer than the bound."""
        text = msg.query_string if isinstance(msg, m.Query) else (
            msg.query if isinstance(msg, m.Parse) else "")
        return len(text) > self.max_message_bytes

    def send(self, msg: m.PGMessage) -> None:
        self.writer.write(self.conn.send(msg))

    def error(self, exc: StreamiqError, *, fatal: bool = False) -> None:
        if self.stats is not None:
            self.stats.error(exc, fatal=fatal)
        self.send(m.ErrorResponse(fields=error_fields(exc, fatal=fatal)))

    def ready(self, in_transaction: bool) -> None:
        self.send(m.ReadyForQuery(status=TransactionStatus.IN_TRANSACTION if in_transaction
                                  else TransactionStatus.IDLE))


@dataclass
class _Loop:
    wire: Wire
    session: Session
    statements: dict[str, tuple[Prepared, list[int]]] = field(default_factory=dict)
    portals: dict[str, _Portal] = field(default_factory=dict)

    def describe_rows(self, schema: Schema | None, formats: list[int]) -> None:
        if schema is None:
            self.wire.send(m.NoData())
            return
        self.wire.send(m.RowDescription(fields=[m.FieldDescription(
            name=name, type_oid=oid_of(duck), type_size=-1, type_modifier=-1,
            format_code=_format(formats, i)) for i, (name, duck) in enumerate(schema)]))

    async def send_answer(self, answer: Answer, formats: list[int]) -> None:
        for notice in answer.notices:
            self.wire.send(m.NoticeResponse(fields={"S": "NOTICE", "V": "NOTICE",
                                                    "C": "01000", "M": notice}))
        if answer.rows is None:
            self.wire.send(m.CommandComplete(tag=answer.tag))
            return
        encoders: list[Callable[[Any], bytes]] = [
            binary_encoder(oid_of(t)) if _format(formats, i) == 1 else encode_text
            for i, t in enumerate(answer.types)]
        for n, row in enumerate(answer.rows, 1):
            self.wire.send(m.DataRow(columns=[None if v is None else enc(v)
                                              for v, enc in zip(row, encoders, strict=True)]))
            if n % _FLUSH_ROWS == 0:
                await self.wire.writer.drain()
        tag = f"SELECT {len(answer.rows)}" if answer.tag == "SELECT" else answer.tag
        self.wire.send(m.CommandComplete(tag=tag))

    async def simple(self, text: str) -> None:
        statements = (split_statements(text) if len(text) <= INLINE_SPLIT
                      else await self.session.split(text))  # a long one: in a SQL worker
        if not statements:
            self.wire.send(m.EmptyQueryResponse())
        for sql in statements:  # the first error ends the whole query string
            answer = await self.session.execute(await self.session.prepare(sql))
            if answer.rows is not None:
                self.describe_rows(tuple(zip(answer.names, answer.types, strict=True)), [])
            await self.send_answer(answer, [])

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
            portal = self._portal(msg.portal)
            answer = portal.answer or await self.session.execute(portal.prepared,
                                                                 portal.values)
            portal.answer = None
            await self.send_answer(answer, portal.formats)
        elif isinstance(msg, m.Close):
            (self.statements if msg.kind == "S" else self.portals).pop(msg.name, None)
            self.wire.send(m.CloseComplete())

    def _statement(self, name: str) -> tuple[Prepared, list[int]]:
        if name not in self.statements:
            raise BadRequest(f'prepared statement "{name}" does not exist')
        return self.statements[name]

    def _portal(self, name: str) -> _Portal:
        if name not in self.portals:
            raise BadRequest(f'portal "{name}" does not exist')
        return self.portals[name]

    def bind(self, msg: m.Bind) -> None:
        prepared, oids = self._statement(msg.statement)
        formats = list(msg.param_formats) or [0]
        values = [decode_param(v, _format(formats, i) == 1, oids[i] if i < len(oids) else 0)
                  for i, v in enumerate(msg.param_values)]
        self.portals[msg.portal] = _Portal(prepared, values, list(msg.result_formats))

    async def describe(self, msg: m.Describe) -> None:
        if msg.kind == "S":
            prepared, oids = self._statement(msg.name)
            given = [o or 25 for o in oids[:prepared.params]]
            self.wire.send(m.ParameterDescription(
                type_oids=given + [25] * (prepared.params - len(given))))
            self.describe_rows(await self.session.describe(prepared), [])
            return
        portal = self._portal(msg.name)  # run now, send at Execute (never run twice)
        answer = await self.session.execute(portal.prepared, portal.values)
        portal.answer = answer
        self.describe_rows(None if answer.rows is None else tuple(
            zip(answer.names, answer.types, strict=True)), portal.formats)


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
            loop.portals.pop("", None)
            wire.ready(session.settings.in_transaction)
        elif isinstance(msg, m.Query):
            await _answering(wire, loop.simple(msg.query_string))
            wire.ready(session.settings.in_transaction)
        elif not skipping and not isinstance(msg, m.Flush):
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
