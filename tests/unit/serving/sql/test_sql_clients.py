"""psql (Debian's postgresql-client) and SQLAlchemy against PgServer in this process."""

from __future__ import annotations

import shutil
import subprocess

import sqlalchemy as sa
from sqlfake import ServerThread, balances, order_counts

ROWS = {"balances": balances(), "order_counts": order_counts()}
PSQL = shutil.which("psql")


def psql(server: ServerThread, *commands: str, token: str = "demo-token"
         ) -> subprocess.CompletedProcess[str]:
    assert PSQL is not None, "psql is needed: apt-get install postgresql-client"
    args = [PSQL, server.dsn(token=token), "-X", "-A", "-t", "-v", "VERBOSITY=verbose"]
    for c in commands:
        args += ["-c", c]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def test_psql_lists_and_describes_the_views(server: ServerThread) -> None:
    out = psql(server, r"\dt", r"\d order_counts")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "public|balances|table|streamiq", "public|order_counts|table|streamiq",
        "store|character varying||not null|", "type|character varying||not null|",
        "count|bigint|||", "revenue|double precision|||"]


def test_psql_queries_and_errors_on_one_connection(server: ServerThread) -> None:
    out = psql(server, "SELECT account, balance FROM balances WHERE account IN ('1', '2') "
                       "ORDER BY 1", "selec 1", "SELECT * FROM nope",
               "SELECT type, count(*) FROM order_counts GROUP BY type ORDER BY type")
    assert out.stdout.splitlines() == ["1|10", "2|20", "GENERAL|9", "RESTAURANT|9"]
    assert "ERROR:  42601: syntax error" in out.stderr
    assert 'ERROR:  42P01: relation "nope" does not exist' in out.stderr


def test_psql_with_a_bad_password_is_refused(server: ServerThread) -> None:
    out = psql(server, "SELECT 1", token="wrong")
    assert out.returncode == 2
    assert 'password authentication failed for user "analyst"' in out.stderr


def test_sqlalchemy_reflects_the_views_and_reads_them(server: ServerThread) -> None:
    engine = sa.create_engine(f"postgresql+psycopg://analyst:demo-token@127.0.0.1:"
                              f"{server.port}/streamiq?sslmode=disable")
    try:
        inspector = sa.inspect(engine)
        assert inspector.get_table_names() == ["balances", "order_counts"]
        cols = [(c["name"], str(c["type"]), c["nullable"])
                for c in inspector.get_columns("order_counts")]
        assert cols == [("store", "VARCHAR", False), ("type", "VARCHAR", False),
                        ("count", "BIGINT", True), ("revenue", "DOUBLE PRECISION", True)]
        table = sa.Table("balances", sa.MetaData(), autoload_with=engine)
        with engine.connect() as conn:
            got = conn.execute(sa.select(table.c.balance).where(table.c.account == "9"))
            assert got.all() == [(90,)]
    finally:
        engine.dispose()
