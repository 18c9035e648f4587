"""psycopg 3 against PgServer (in this process, a fake engine behind it): every query
shape equals DuckDB's answer over the whole views, pushed down as planned; prepared
statements, binary results, SQLSTATEs with the connection still usable."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import duckdb
import psycopg
import pytest
from psycopg import errors
from sqlfake import FakeEngine, ServerThread, balances, order_counts
from sqlviews import VIEWS

from streamiq.serving.sql.duck import arrow_table
from streamiq.serving.sql.engine import Column, ViewInfo
from streamiq.serving.sql.types import duck_of_spark

ROWS = {"balances": balances(), "order_counts": order_counts()}


@pytest.fixture(scope="module")
def truth() -> Iterator[duckdb.DuckDBPyConnection]:
    """The views whole in DuckDB: what every query's answer must equal."""
    db = duckdb.connect()
    for name, view in VIEWS.items():
        cols = [(c.name, duck_of_spark(c.type)) for c in view.columns]
        db.register(f"{name}_rows", arrow_table(cols, ROWS[name]))
        db.execute(f"CREATE TABLE {name} AS SELECT * FROM {name}_rows")
    yield db
    db.close()


@pytest.fixture
def conn(server: ServerThread) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(server.dsn(), autocommit=True) as c:
        yield c


# (query, the engine calls it makes: each view read once, through the planned read)
SHAPES = [
    ("SELECT account, balance FROM balances WHERE account = '7'", [("lookup", "balances")]),
    ("SELECT * FROM balances WHERE account IN ('1', '2', '3', 'nope')",
     [("multi_get", "balances")]),
    ("SELECT count, revenue FROM order_counts WHERE store = 'store-9' "
     "AND type IN ('GENERAL', 'RESTAURANT')", [("multi_get", "order_counts")]),
    ("SELECT account, balance FROM balances WHERE account LIKE '1%'", [("scan", "balances")]),
    ("SELECT * FROM balances WHERE account BETWEEN '2' AND '3'", [("scan", "balances")]),
    ("SELECT * FROM order_counts WHERE store >= 'store-8' AND count > 9",
     [("scan", "order_counts")]),
    ("SELECT type, count(*), sum(count), avg(revenue), min(store), max(revenue) "
     "FROM order_counts GROUP BY type", [("aggregate", "order_counts")]),
    ("SELECT type, sum(count) AS n FROM order_counts GROUP BY type HAVING sum(count) > 1 "
     "ORDER BY n DESC LIMIT 1", [("aggregate", "order_counts")]),
    ("SELECT store, max(revenue) FROM order_counts WHERE store LIKE 'store-9%' GROUP BY store",
     [("aggregate", "order_counts")]),
    ("SELECT count(*) FROM balances", [("aggregate", "balances")]),
    ("SELECT type, count(DISTINCT store) FROM order_counts GROUP BY type",
     [("scan", "order_counts")]),
    ("SELECT b.account, b.balance, o.count FROM balances b JOIN order_counts o "
     "ON o.store = b.account WHERE b.account = 'store-9'",
     [("lookup", "balances"), ("scan", "order_counts")]),
    ("SELECT account, balance FROM balances ORDER BY balance DESC LIMIT 3 OFFSET 1",
     [("scan", "balances")]),
    ("SELECT account, balance * 2 AS dbl, rank() OVER (ORDER BY balance DESC) AS r "
     "FROM balances WHERE account LIKE '2%'", [("scan", "balances")]),
    ("WITH big AS (SELECT * FROM balances WHERE balance > 200) SELECT count(*) FROM big",
     [("scan", "balances")]),
]


def _sorted(rows: list[Any]) -> list[Any]:
    return sorted(rows, key=repr)


@pytest.mark.parametrize(("sql", "calls"), SHAPES, ids=[s for s, _ in SHAPES])
def test_every_shape_equals_the_ground_truth(server: ServerThread, truth: Any,
                                             conn: psycopg.Connection[Any], sql: str,
                                             calls: list[tuple[str, str]]) -> None:
    server.engine.calls.clear()
    got = conn.execute(sql).fetchall()
    want = truth.execute(sql).fetchall()
    ordered = "ORDER BY" in sql
    assert (got if ordered else _sorted(got)) == (want if ordered else _sorted(want))
    assert got, "every shape here has rows"
    assert server.engine.calls == calls


def test_column_names_and_types_are_postgresql_s(conn: psycopg.Connection[Any]) -> None:
    cur = conn.execute("SELECT account, balance, count(*) AS n FROM balances "
                       "WHERE account = '3' GROUP BY account, balance")
    assert [(d.name, d.type_code) for d in cur.description or []] == [
        ("account", 25), ("balance", 1700), ("n", 20)]
    cur = conn.execute("SELECT type, count(*), avg(revenue) FROM order_counts GROUP BY type")
    assert [d.name for d in cur.description or []] == ["type", "count", "avg"]


def test_parameters_and_prepared_statements(server: ServerThread,
                                            conn: psycopg.Connection[Any]) -> None:
    q = "SELECT balance, count FROM balances WHERE account = %s"
    assert conn.execute(q, ("7",)).fetchall() == [(70, 7)]
    got = [conn.execute(q, (str(k),), prepare=True).fetchone() for k in (1, 2, 3, 4, 5)]
    assert got == [(k * 10, k) for k in (1, 2, 3, 4, 5)]
    assert conn.execute("SELECT account FROM balances WHERE balance > %s AND account LIKE %s",
                        (250, "2%")).fetchall() == [("26",), ("27",), ("28",), ("29",)]
    server.engine.calls.clear()
    conn.execute(q, ("8",), prepare=True)
    assert server.engine.calls == [("lookup", "balances")]


def test_binary_results(conn: psycopg.Connection[Any]) -> None:
    cur = conn.cursor(binary=True)
    got = cur.execute("SELECT store, type, count, revenue FROM order_counts "
                      "WHERE store = %s AND type = %s", ("store-2", "GENERAL")).fetchall()
    assert got == [("store-2", "GENERAL", 2, 5.0)]


@pytest.mark.parametrize(("sql", "error"), [
    ("selec 1", errors.SyntaxError), ("SELECT * FROM nope", errors.UndefinedTable),
    ("SELECT nope FROM balances", errors.SyntaxError),
    ("DELETE FROM balances", errors.SyntaxError)])
def test_errors_leave_the_connection_usable(conn: psycopg.Connection[Any], sql: str,
                                            error: type[Exception]) -> None:
    with pytest.raises(error):
        conn.execute(sql)
    assert conn.execute("SELECT balance FROM balances WHERE account = %s",
                        ("2",)).fetchall() == [(20,)]
    with pytest.raises(error):
        conn.execute(sql, prepare=True)
    assert conn.execute("SELECT 1").fetchall() == [(1,)]


def test_a_transaction_as_psycopg_opens_it(server: ServerThread) -> None:
    with psycopg.connect(server.dsn()) as c:  # not autocommit: BEGIN first
        assert c.execute("SELECT count FROM balances WHERE account = '4'").fetchone() == (4,)
        status = psycopg.pq.TransactionStatus
        assert c.info.transaction_status == status.INTRANS
        c.commit()
        assert str(c.info.transaction_status) == str(status.IDLE)  # mypy narrowed it


def test_a_windowed_view_has_its_window_bounds_as_columns() -> None:
    windowed = ViewInfo("order_counts_1m", ("store", "type"), (
        Column("store", "string"), Column("type", "string"), Column("window_start", "bigint"),
        Column("window_end", "bigint"), Column("count", "bigint")))
    rows = [{"store": "s1", "type": "GENERAL", "window_start": w, "window_end": w + 60_000,
             "count": w // 60_000} for w in (0, 60_000, 120_000)]
    srv = ServerThread(FakeEngine([windowed], {"order_counts_1m": rows}))
    try:
        with psycopg.connect(srv.dsn(), autocommit=True) as c:
            key = "store = 's1' AND type = 'GENERAL'"
            assert c.execute(f"SELECT window_start, count FROM order_counts_1m WHERE {key}"
                             ).fetchall() == [(0, 0), (60_000, 1), (120_000, 2)]
            assert c.execute(f"SELECT count FROM order_counts_1m WHERE {key} "
                             "AND window_start >= 60000").fetchall() == [(1,), (2,)]
            assert srv.engine.calls == [("lookup", "order_counts_1m")] * 2
    finally:
        srv.stop()
