"""The SQL port's errors by SQLSTATE (for the node's /metrics) and its log of refused
connections: one line per interval in a flood, the rest counted in the next line."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psycopg
import pytest
from sqlfake import FakeEngine, ServerThread, balances
from sqlviews import BALANCES

from streamiq.metrics import exposition


@pytest.fixture
def server() -> Iterator[ServerThread]:
    s = ServerThread(FakeEngine([BALANCES], {"balances": balances()}))
    yield s
    s.stop()


def _exposed(server: ServerThread) -> str:
    return exposition(server.server.metrics)().decode()


def test_errors_are_counted_by_sqlstate_and_refusals_logged_once_per_interval(
        server: ServerThread, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "streamiq.sql")
    for _ in range(3):
        with pytest.raises(psycopg.OperationalError, match="password authentication"):
            psycopg.connect(server.dsn("not-a-token"))
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.UndefinedTable):
            conn.execute("SELECT * FROM nope")
        assert 'streamiq_sql_sessions 1.0' in _exposed(server)
        assert 'streamiq_sql_workers 1.0' in _exposed(server)  # one, while nothing waits
        assert 'streamiq_sql_workers_replaced_total 0.0' in _exposed(server)
    text = _exposed(server)
    assert 'streamiq_sql_errors_total{scope="connection",sqlstate="28P01"} 3.0' in text
    assert 'streamiq_sql_errors_total{scope="statement",sqlstate="42P01"} 1.0' in text
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1 and "28P01" in refused[0], refused  # the others held back
    stats = server.server.stats
    stats.log_interval_s = 0  # the next line names the ones held back
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(server.dsn("not-a-token"))
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 2 and "2 more since the last" in refused[1], refused


def test_statements_are_counted_by_how_they_read(server: ServerThread) -> None:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        for sql in ("SELECT * FROM balances WHERE account = '1'",
                    "SELECT * FROM balances WHERE account IN ('1', '2')",
                    "SELECT * FROM balances WHERE account LIKE '1%'",
                    "SELECT count(*) FROM balances GROUP BY count",
                    "SELECT count(*) FROM balances a JOIN balances b USING (account)",
                    "SELECT relname FROM pg_class",
                    "SELECT * FROM balances WHERE account = '2'"):
            conn.execute(sql).fetchall()
    text = _exposed(server)
    for kind, n in (("lookup", 2), ("multiget", 1), ("scan", 1), ("aggregate", 1),
                    ("gather", 1), ("catalog", 1)):
        assert f'streamiq_sql_statements_total{{kind="{kind}"}} {n}.0' in text, (kind, text)
