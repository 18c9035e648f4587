"""A PgServer's sessions with psycopg 3: the password is a token and its scopes hold,
bounds (connections, rows, gathered rows) give their SQLSTATEs, a cancel request stops
the running statement, SET streamiq.* gives the HTTP API's consistency, TLS."""

from __future__ import annotations

import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import trustme
from psycopg import errors
from sqlfake import FakeEngine, ServerThread, balances, order_counts
from sqlviews import VIEWS
from waits import until

from streamiq.serving.sql.execute import Limits

ROWS = {"balances": balances(), "order_counts": order_counts()}


def _engine() -> FakeEngine:
    return FakeEngine(list(VIEWS.values()), ROWS)


@pytest.fixture
def server() -> Iterator[ServerThread]:
    srv = ServerThread(_engine(), limits=Limits(max_rows=20, max_gather=25),
                       max_connections=3)
    yield srv
    srv.stop()


def test_the_password_is_a_token(server: ServerThread) -> None:
    for bad in ("nope", ""):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(server.dsn(token=bad))
    with psycopg.connect(server.dsn()) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_a_token_sees_only_its_views(server: ServerThread) -> None:
    with psycopg.connect(server.dsn(token="balances-only"), autocommit=True) as c:
        with pytest.raises(errors.UndefinedTable, match='"order_counts" does not exist'):
            c.execute("SELECT * FROM order_counts")
        assert c.execute("SELECT balance FROM balances WHERE account = '1'").fetchall() \
            == [(10,)]
        tables = c.execute("SELECT table_name FROM information_schema.tables "
                           "WHERE table_schema = 'public'").fetchall()
        assert tables == [("balances",)]


def test_too_many_connections_is_53300(server: ServerThread) -> None:
    held = [psycopg.connect(server.dsn()) for _ in range(3)]
    try:
        with pytest.raises(psycopg.OperationalError, match="too many clients"):
            psycopg.connect(server.dsn())
    finally:
        for c in held:
            c.close()
    with psycopg.connect(server.dsn()) as c:  # a slot freed is a slot again
        assert c.execute("SELECT 1").fetchone() == (1,)


def test_row_limits_are_54000_and_the_connection_lives(server: ServerThread) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        with pytest.raises(errors.ProgramLimitExceeded, match="more than 20 rows"):
            c.execute("SELECT * FROM order_counts a JOIN order_counts b ON a.type = b.type")
        with pytest.raises(errors.ProgramLimitExceeded, match="more than 25 rows of balances"):
            c.execute("SELECT count(DISTINCT account) FROM balances")  # 31 rows to gather
        keys = ", ".join(f"'{i}'" for i in range(1, 22))  # 21 rows, answered directly
        with pytest.raises(errors.ProgramLimitExceeded, match="more than 20 rows"):
            c.execute(f"SELECT * FROM balances WHERE account IN ({keys})")
        assert len(c.execute("SELECT * FROM order_counts").fetchall()) == 18
        # a range gathers its own rows only (both bounds pushed), not all from its start
        for sql, params in (("account >= '1' AND account < '11'", ()),
                            ("account < %s AND account >= %s", ("11", "1"))):
            assert c.execute(f"SELECT account FROM balances WHERE {sql} ORDER BY 1",
                             params).fetchall() == [("1",), ("10",)]


@pytest.mark.parametrize(("setup", "sql"), [
    # an engine read waiting for a position never written
    ("SET streamiq.position = 'orders:1:5'", "SELECT * FROM balances WHERE account = '1'"),
    # a DuckDB step at work (interrupted)
    ("RESET ALL", "SELECT count(*) FROM range(100000000000) t(i) WHERE i % 7 = 3")])
def test_a_cancel_request_stops_the_statement(server: ServerThread, setup: str,
                                              sql: str) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute(setup)
        failed: list[BaseException] = []

        def run() -> None:
            try:
                c.execute(sql)
            except psycopg.Error as exc:
                failed.append(exc)
        t = threading.Thread(target=run)
        t.start()
        server.call(until(lambda: any(s.running for s in server.server.sessions.values()),
                          "the statement runs"))
        c.cancel_safe()  # cancel() deadlocks against a server in this process
        t.join(60)
        assert [type(e) for e in failed] == [errors.QueryCanceled]
        c.execute("RESET streamiq.position")
        assert c.execute("SELECT count FROM balances WHERE account = '2'").fetchone() == (2,)


def test_a_statement_timeout_cancels(server: ServerThread) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute("SET streamiq.position = 'orders:1:5'")  # never written: waits
        c.execute("SET statement_timeout = '50ms'")
        with pytest.raises(errors.QueryCanceled, match="statement timeout"):
            c.execute("SELECT * FROM balances WHERE account = '1'")
        c.execute("RESET streamiq.position")
        c.execute("RESET statement_timeout")  # 50 ms covers planning a new statement too
        assert c.execute("SELECT count FROM balances WHERE account = '2'").fetchone() == (2,)


def test_a_position_set_in_the_session_waits_for_its_write(server: ServerThread) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.execute("SET streamiq.position = 'bank:2:41'")
        assert c.execute("SHOW streamiq.position").fetchone() == ("bank:2:41",)
        got: list[Any] = []
        t = threading.Thread(target=lambda: got.append(c.execute(
            "SELECT balance FROM balances WHERE account = '3'").fetchall()))
        t.start()
        server.call(until(lambda: server.engine.calls == [("lookup", "balances")],
                          "the lookup waits"))
        assert t.is_alive() and not got
        server.call(server.engine.advance("bank", 2, 42))
        t.join(30)
        assert got == [[(30,)]]


def test_unreachable_partitions_fail_or_with_partial_on_give_a_notice(
        server: ServerThread) -> None:
    server.engine.missing = {1}
    notices: list[str] = []
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        c.add_notice_handler(lambda d: notices.append(str(d.message_primary)))
        with pytest.raises(errors.CannotConnectNow, match="partitions 1 of order_counts"):
            c.execute("SELECT type, count(*) FROM order_counts GROUP BY type")
        c.execute("SET streamiq.partial = on")
        got = c.execute("SELECT * FROM order_counts").fetchall()
        assert 0 < len(got) < 18
        assert notices == ["partial answer: partitions 1 of order_counts are missing"]


@pytest.mark.parametrize(("sql", "error"), [
    ("SET streamiq.position = 'nope'", errors.InvalidParameterValue),
    ("SET streamiq.max_lag = -1", errors.InvalidParameterValue),
    ("SET streamiq.max_staleness_ms = -1", errors.InvalidParameterValue),
    ("SET streamiq.max_staleness_ms = 3600001", errors.InvalidParameterValue),
    ("SET streamiq.partial = maybe", errors.InvalidParameterValue),
    ("SET streamiq.nope = 1", errors.UndefinedObject),
    ("SET statement_timeout = 'soon'", errors.InvalidParameterValue),
    ("SHOW nope", errors.UndefinedObject)])
def test_bad_settings_are_refused_clearly(server: ServerThread, sql: str,
                                          error: type[Exception]) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        with pytest.raises(error):
            c.execute(sql)
        c.execute("SET streamiq.max_lag = 5")
        assert c.execute("SHOW streamiq.max_lag").fetchone() == ("5",)


def test_tls_from_an_ssl_context(tmp_path: Path) -> None:
    ca = trustme.CA()
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(tls)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    srv = ServerThread(_engine(), tls=tls)
    try:
        dsn = srv.dsn(sslmode="verify-full", sslrootcert=str(tmp_path / "ca.pem"))
        with psycopg.connect(dsn) as c:
            assert c.pgconn.ssl_in_use
            assert c.execute("SELECT count FROM balances WHERE account = '5'").fetchone() == (5,)
        with pytest.raises(psycopg.OperationalError, match="requires TLS"):
            psycopg.connect(srv.dsn())  # sslmode=disable
    finally:
        srv.stop()


@pytest.mark.parametrize("sql", [
    "SELECT * FROM read_text('/etc/hostname')", "SELECT * FROM read_blob('/etc/hostname')",
    "SELECT count(*) FROM read_csv('/etc/passwd')"])
def test_no_file_is_reachable_through_sql(server: ServerThread, sql: str) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        with pytest.raises(errors.InsufficientPrivilege, match="file system operations"):
            c.execute(sql)
        c.execute("SET enable_external_access = true")  # a session setting, not DuckDB's
        with pytest.raises(errors.InsufficientPrivilege):
            c.execute(sql)
        assert c.execute("SELECT 1").fetchone() == (1,)


def _raw(server: ServerThread, data: bytes, *, to_the_end: bool = True) -> bytes:
    """What the server answers ``data`` on a fresh connection: until it closes it, or
    its first reply."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(data)
        got = s.recv(65536)
        while to_the_end and (chunk := s.recv(65536)):
            got += chunk
        return got


def test_bytes_that_are_not_the_protocol_close_only_their_connection() -> None:
    srv = ServerThread(_engine(), max_message_bytes=4096)
    try:
        for junk in (b"\x00\x00\x00\x08\xff\xff\xff\xff",  # not a protocol version
                     b"\x00\x00\x20\x00" + b"x" * 5000):  # a message past the size bound
            reply = _raw(srv, junk)
            assert reply[:1] == b"E" and b"SFATAL" in reply
        params = b"user\x00analyst\x00\x00"  # well-formed: asked for the password
        startup = struct.pack("!ii", 8 + len(params), 196608) + params
        assert _raw(srv, startup, to_the_end=False)[:1] == b"R"
        with psycopg.connect(srv.dsn()) as c:  # and the server serves on
            assert c.execute("SELECT count FROM balances WHERE account = '7'").fetchone() == (7,)
    finally:
        srv.stop()


def test_a_staleness_bound_is_a_setting_the_statements_carry() -> None:
    """``SET streamiq.max_staleness_ms`` reaches the query layer's Freshness (the HTTP
    API's ``max_staleness_ms``); RESET takes it away."""
    from streamiq.serving.sql.adapter import _fresh
    from streamiq.serving.sql.settings import Settings

    s = Settings()
    assert _fresh(s.fresh).max_staleness_ms is None
    s.command("SET", "SET streamiq.max_staleness_ms = 0")
    assert _fresh(s.fresh).max_staleness_ms == 0 and _fresh(s.fresh).waits
    s.command("SET", "SET streamiq.max_staleness_ms TO 250")
    assert _fresh(s.fresh).max_staleness_ms == 250
    s.command("RESET", "RESET streamiq.max_staleness_ms")
    assert _fresh(s.fresh).max_staleness_ms is None


def test_a_consistent_statement_reads_one_cut_asked_again_lower_and_shown() -> None:
    """``SET streamiq.consistent = on``: every read of a statement carries one cut,
    chosen once; a replica's lower cut makes the statement run again at it; ``SHOW
    streamiq.cut`` names what the last one read; a transaction keeps its first cut."""
    engine = _engine()
    srv = ServerThread(engine)
    try:
        with psycopg.connect(srv.dsn(), autocommit=True) as c:
            c.execute("SELECT count(*) FROM balances")
            assert engine.read_at == [None] and c.execute("SHOW streamiq.cut").fetchone() == ("",)
            c.execute("SET streamiq.consistent = on")
            engine.read_at.clear()
            c.execute("SELECT sum(count) FROM balances")
            assert engine.read_at == ["in:0:10"]
            assert c.execute("SHOW streamiq.cut").fetchone() == ("in:0:10",)
            engine.moves = ["in:0:15", None]  # lower, then gone: a new cut
            engine.read_at.clear()
            c.execute("SELECT sum(count) FROM balances")
            assert engine.read_at == ["in:0:20", "in:0:15", "in:0:30"]
            assert c.execute("SHOW streamiq.cut").fetchone() == ("in:0:30",)
            with pytest.raises(errors.InvalidParameterValue, match="cannot be changed"):
                c.execute("SET streamiq.cut = 'in:0:1'")
        with psycopg.connect(srv.dsn()) as c:  # a transaction (psycopg's BEGIN)
            c.execute("SET streamiq.consistent = on")
            engine.read_at.clear()
            c.execute("SELECT sum(count) FROM balances")
            c.execute("SELECT count(*) FROM balances")
            c.commit()
            c.execute("SELECT count(*) FROM balances")
            assert engine.read_at == ["in:0:40", "in:0:40", "in:0:50"]
            engine.moves = [None]  # the transaction's cut gone: refused, not moved
            with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="new tr"):
                c.execute("SELECT count(*) FROM balances")
    finally:
        srv.stop()
