"""The extended protocol's message flow as PostgreSQL's, driven message by message by a
raw client (pygwire's frontend side): a Query between Parse/Describe/Flush and Sync,
portals read max_rows at a time, parameters described by what they are compared with,
binary results, SQL cursors and COPY TO STDOUT; and the clients that rely on it."""

from __future__ import annotations

import asyncio
import decimal
import io
import socket
import struct
from collections.abc import Iterator
from typing import Any

import asyncpg
import psycopg
import pytest
from psycopg import errors
from pygwire import FrontendConnection
from pygwire import messages as m
from sqlfake import FakeEngine, ServerThread, balances, order_counts
from sqlviews import VIEWS

ROWS = {"balances": balances(), "order_counts": order_counts()}


class Raw:
    """One connection, messages sent and read one by one."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.conn = FrontendConnection(strict=False)  # it, too, refuses a Query before Sync
        self.pending: list[m.PGMessage] = []
        self.send(m.StartupMessage(params={"user": "raw", "database": "streamiq"}))
        self.until(m.AuthenticationCleartextPassword)
        self.send(m.PasswordMessage(password="demo-token"))
        self.until(m.ReadyForQuery)

    def send(self, *msgs: m.PGMessage) -> None:
        self.sock.sendall(b"".join(self.conn.send(x) for x in msgs))

    def next(self) -> m.PGMessage:
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the server closed the connection")
            self.pending.extend(self.conn.receive(data))
        return self.pending.pop(0)

    def until(self, kind: type[m.PGMessage]) -> list[m.PGMessage]:
        """The messages up to and with the first of ``kind``."""
        got = [self.next()]
        while not isinstance(got[-1], kind):
            got.append(self.next())
        return got

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def raw(server: ServerThread) -> Iterator[Raw]:
    client = Raw(server.port)
    yield client
    client.close()


def _kinds(msgs: list[m.PGMessage]) -> list[str]:
    return [type(x).__name__ for x in msgs]


def test_a_query_between_describe_flush_and_sync_is_answered(raw: Raw) -> None:
    """asyncpg's copy_from_query and SQLAlchemy's reflection send one (no FATAL)."""
    raw.send(m.Parse(statement="s1", query="SELECT balance FROM balances WHERE account = $1"),
             m.Describe(kind="S", name="s1"), m.Flush())
    got = raw.until(m.RowDescription)
    assert _kinds(got) == ["ParseComplete", "ParameterDescription", "RowDescription"]
    raw.send(m.Query(query_string="SELECT 41 + 1"))
    answer = raw.until(m.ReadyForQuery)
    assert _kinds(answer) == ["RowDescription", "DataRow", "CommandComplete", "ReadyForQuery"]
    assert isinstance(answer[1], m.DataRow) and answer[1].columns == [b"42"]


def test_parameters_are_described_by_what_they_are_compared_with(raw: Raw) -> None:
    raw.send(m.Parse(statement="p", query="SELECT account FROM balances WHERE balance > $1 "
                                           "AND count = $2 AND account = ANY($3) LIMIT $4"),
             m.Describe(kind="S", name="p"), m.Sync())
    got = raw.until(m.ReadyForQuery)
    assert isinstance(got[1], m.ParameterDescription)
    assert got[1].type_oids == [1700, 20, 1009, 20]  # numeric, bigint, text[], bigint


def test_a_portal_is_read_max_rows_at_a_time(raw: Raw) -> None:
    raw.send(m.Parse(query="SELECT account FROM balances ORDER BY account"),
             m.Bind(portal="p"), m.Execute(portal="p", max_rows=12), m.Flush())
    first = raw.until(m.PortalSuspended)
    assert _kinds(first).count("DataRow") == 12
    raw.send(m.Execute(portal="p", max_rows=12), m.Execute(portal="p", max_rows=12), m.Sync())
    rest = raw.until(m.ReadyForQuery)
    assert _kinds(rest).count("DataRow") == len(ROWS["balances"]) - 12
    assert _kinds(rest)[-3:] == ["DataRow", "CommandComplete", "ReadyForQuery"]
    assert "PortalSuspended" in _kinds(rest)  # after the second 12
    raw.send(m.Execute(portal="p"), m.Sync())  # outside a transaction: gone at Sync
    gone = raw.until(m.ReadyForQuery)
    assert isinstance(gone[0], m.ErrorResponse) and gone[0].fields["C"] == "34000"


def test_numeric_and_every_view_type_come_back_in_binary(raw: Raw) -> None:
    raw.send(m.Parse(query="SELECT account, balance, count FROM balances WHERE account = $1"),
             m.Bind(param_formats=[0], param_values=[b"7"], result_formats=[1]),
             m.Execute(), m.Sync())
    row = next(x for x in raw.until(m.ReadyForQuery) if isinstance(x, m.DataRow))
    assert row.columns == [b"7", struct.pack("!hhHHh", 1, 0, 0, 0, 70), struct.pack("!q", 7)]


def test_declare_fetch_move_and_close_in_a_transaction() -> None:
    srv = ServerThread(FakeEngine(list(VIEWS.values()), ROWS))
    try:
        with psycopg.connect(srv.dsn()) as conn:
            cur = conn.cursor()
            cur.execute("DECLARE c CURSOR FOR SELECT account FROM balances ORDER BY account")
            assert cur.execute("FETCH 2 FROM c").fetchall() == [("1",), ("10",)]
            cur.execute("MOVE FORWARD 3 IN c")
            assert cur.execute("FETCH NEXT FROM c").fetchall() == [("14",)]
            assert len(cur.execute("FETCH ALL FROM c").fetchall()) == len(ROWS["balances"]) - 6
            cur.execute("CLOSE c")
            with pytest.raises(errors.InvalidCursorName, match='cursor "c" does not exist'):
                cur.execute("FETCH 1 FROM c")
        with psycopg.connect(srv.dsn(), autocommit=True) as conn:
            with pytest.raises(errors.InvalidParameterValue, match="transaction blocks"):
                conn.execute("DECLARE d CURSOR FOR SELECT 1")
            conn.execute("DECLARE h CURSOR WITH HOLD FOR SELECT account FROM balances "
                         "ORDER BY account")
            assert conn.execute("FETCH 1 FROM h").fetchall() == [("1",)]  # outlived it
            with pytest.raises(errors.InvalidParameterValue, match="only scan forward"):
                conn.execute("FETCH PRIOR FROM h")
    finally:
        srv.stop()


def test_asyncpg_types_parameters_and_copies_out(server: ServerThread) -> None:
    async def run() -> tuple[Any, ...]:
        conn = await asyncpg.connect(host="127.0.0.1", port=server.port, user="a",
                                     password="demo-token", database="streamiq", ssl=False)
        try:
            ints = await conn.fetch("SELECT account FROM balances WHERE count >= $1 AND "
                                    "balance < $2 ORDER BY account", 28, decimal.Decimal(300))
            out = io.BytesIO()
            copied = await conn.copy_from_query("SELECT account, balance FROM balances "
                                                "WHERE account IN ($1, $2)", "2", "3",
                                                output=out)
            return [r[0] for r in ints], copied, sorted(out.getvalue().splitlines())
        finally:
            await conn.close()
    assert asyncio.run(run()) == (["28", "29"], "COPY 2", [b"2\t20", b"3\t30"])
