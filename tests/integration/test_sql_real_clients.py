"""The clients users run against 3 real nodes (issue 38): psql, psycopg 3 (text and
binary), psycopg2, asyncpg, SQLAlchemy on psycopg and on asyncpg (reflection included),
pandas' read_sql in chunks, and pgjdbc (DBeaver's and Metabase's driver: its
DatabaseMetaData, their own catalog queries, prepared statements past the driver's
server-prepare threshold with binary results).

The same nodes and rows as test_sql_e2e.py (tests/sqlnodes.py): changelogs written
directly (no Spark), client authentication on. Each client reads a different node.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import io
from collections.abc import Iterator
from typing import Any

import asyncpg
import pandas as pd
import psycopg
import psycopg2
import pytest
import sqlalchemy as sa
from jdbc import jdbc_client
from sqlalchemy.ext.asyncio import create_async_engine
from sqlnodes import BAL, ORDERS, connect, psql, start_nodes

pytestmark = pytest.mark.integration

ACCOUNTS = sorted(str(r["account"]) for r in BAL)
TRUTH = {str(r["account"]): r for r in BAL}


@pytest.fixture
def nodes(cluster: Any) -> Iterator[list[tuple[int, int]]]:
    """3 nodes serving bank and orders, each with its SQL port: [(http, sql)]."""
    yield start_nodes(cluster)


def test_real_clients_on_three_nodes(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """One cluster start (3 nodes) for every client."""
    ports = [sql for _, sql in nodes]
    _psql_describes_lists_and_splits(ports[0], cluster.token)
    _psycopg_in_text_and_binary(ports[1], cluster.token)
    _psycopg2_and_pandas_read_with_server_cursors(ports[2], cluster.token)
    asyncio.run(_asyncpg(ports[0], cluster.token))
    _sqlalchemy_reflects_on_psycopg_and_asyncpg(ports[1], cluster.token)
    _pgjdbc(ports[2], cluster.token)


def _psql_describes_lists_and_splits(port: int, token: str) -> None:
    out = psql(port, token, r"\d balances", r"\df", r"\du", r"\di",
               "SELECT 'a;b' /* ; */ AS x; SELECT $$c;d$$ AS y",
               "SELECT " + "(" * 5000 + "1" + ")" * 5000)
    lines = out.stdout.splitlines()
    assert lines[:4] == ["account|character varying||not null|",
                         "balance|numeric|||", "count|bigint|||",
                         "last_update|bigint|||"], out.stdout  # \d (its footer: -t drops it)
    assert "streamiq||{}" in lines  # \du: the one role (\df lists no functions)
    assert "public|balances_pkey|index|streamiq|balances" in lines  # \di: the key's index
    assert lines[-2:] == ["a;b", "c;d"]  # ; inside a comment and $$ quotes: one statement
    assert "ERROR:  54001: the statement nests more than" in out.stderr, out.stderr
    assert out.stderr.count("ERROR") == 1, out.stderr


def _psycopg_in_text_and_binary(port: int, token: str) -> None:
    asked = ACCOUNTS[3:6]
    want = [(a, TRUTH[a]["balance"], TRUTH[a]["count"]) for a in asked]
    with connect(port, token) as conn:
        for binary in (False, True):
            cur = conn.cursor(binary=binary)
            got = cur.execute("SELECT account, balance, count FROM balances "
                              "WHERE account = ANY(%s) ORDER BY account", (asked,)).fetchall()
            assert got == want, binary
            assert all(isinstance(b, decimal.Decimal) for _, b, _ in got)
            row = cur.execute(
                "SELECT to_timestamp(last_update / 1000) AS ts, CAST(to_timestamp("
                "last_update / 1000) AS DATE) AS d, balance > 0 AS pos, count * 0.5 AS half "
                "FROM balances WHERE account = %s", (asked[0],)).fetchone()
            stamp = datetime.datetime.fromtimestamp(TRUTH[asked[0]]["last_update"] / 1000,
                                                    datetime.UTC)  # DuckDB's / on integers
            assert row == (stamp, stamp.date(), TRUTH[asked[0]]["balance"] > 0,
                           TRUTH[asked[0]]["count"] * 0.5), binary
    with psycopg.connect(host="127.0.0.1", port=port, user="tests", dbname="streamiq",
                         password=token, sslmode="disable") as conn, \
            conn.cursor(name="accounts", binary=True) as named:  # in a transaction: DECLARE
        named.execute("SELECT account, balance FROM balances WHERE balance > %s "
                      "ORDER BY account", (decimal.Decimal(300),))
        first = named.fetchmany(2)  # FETCH FORWARD 2
        rest = named.fetchall()
    rich = [(a, TRUTH[a]["balance"]) for a in ACCOUNTS if TRUTH[a]["balance"] > 300]
    assert first + rest == rich and len(first) == 2


def _psycopg2_and_pandas_read_with_server_cursors(port: int, token: str) -> None:
    conn = psycopg2.connect(host="127.0.0.1", port=port, user="tests", dbname="streamiq",
                            password=token, sslmode="disable")
    try:
        named = conn.cursor("balances_cursor")
        named.itersize = 7  # FETCH FORWARD 7 at a time
        named.execute("SELECT account, balance FROM balances WHERE account = ANY(%s) "
                      "ORDER BY account", (ACCOUNTS[:20],))
        assert list(named) == [(a, TRUTH[a]["balance"]) for a in ACCOUNTS[:20]]
        named.close()
        plain = conn.cursor()
        plain.execute("DECLARE c CURSOR FOR SELECT account FROM balances ORDER BY account; "
                      "MOVE 10 FROM c; FETCH 2 FROM c")
        assert plain.fetchall() == [(a,) for a in ACCOUNTS[10:12]]
        conn.rollback()
    finally:
        conn.close()
    engine = sa.create_engine(f"postgresql+psycopg2://tests:{token}@127.0.0.1:{port}/streamiq"
                              "?sslmode=disable")
    try:
        with engine.connect().execution_options(stream_results=True) as sconn:
            chunks = list(pd.read_sql("SELECT store, type, count FROM order_counts "
                                      "ORDER BY store, type", sconn, chunksize=15))
    finally:
        engine.dispose()
    assert [len(c) for c in chunks] == [15, 15, 10]
    frame = pd.concat(chunks)
    assert list(frame.itertuples(index=False, name=None)) == sorted(
        (r["store"], r["type"], r["count"]) for r in ORDERS)


async def _asyncpg(port: int, token: str) -> None:
    conn = await asyncpg.connect(host="127.0.0.1", port=port, user="tests", password=token,
                                 database="streamiq", ssl=False)
    try:
        key = ACCOUNTS[8]
        row = await conn.fetchrow("SELECT account, balance, count FROM balances "
                                  "WHERE account = $1", key)
        assert row is not None
        assert tuple(row) == (key, TRUTH[key]["balance"], TRUTH[key]["count"])
        big = await conn.fetch("SELECT account FROM balances WHERE count > $1 AND balance >= "
                               "$2 ORDER BY account LIMIT $3", 3, decimal.Decimal(100), 4)
        assert [r[0] for r in big] == [a for a in ACCOUNTS if TRUTH[a]["count"] > 3
                                       and TRUTH[a]["balance"] >= 100][:4]
        some = await conn.fetch("SELECT account FROM balances WHERE account = ANY($1) "
                                "ORDER BY account", ACCOUNTS[:3])
        assert [r[0] for r in some] == ACCOUNTS[:3]
        async with conn.transaction():  # a portal read 9 rows at a time
            read = [r[0] async for r in conn.cursor(
                "SELECT account FROM balances ORDER BY account", prefetch=9)]
        assert read == ACCOUNTS
        out = io.BytesIO()
        status = await conn.copy_from_query(
            "SELECT account, balance FROM balances WHERE account < $1 ORDER BY account",
            ACCOUNTS[2], output=out, format="csv")
        assert status == "COPY 2"
        assert out.getvalue().decode().splitlines() == [
            f"{a},{TRUTH[a]['balance']}" for a in ACCOUNTS[:2]]
    finally:
        await conn.close()


def _sqlalchemy_reflects_on_psycopg_and_asyncpg(port: int, token: str) -> None:
    url = f"tests:{token}@127.0.0.1:{port}/streamiq"

    def reflect(sync: Any) -> Any:
        insp = sa.inspect(sync)
        table = sa.Table("order_counts", sa.MetaData(), autoload_with=sync)
        return (sorted(insp.get_table_names()), [c.name for c in table.columns],
                insp.get_pk_constraint("order_counts")["constrained_columns"],
                sync.execute(sa.select(table.c.count).where(
                    table.c.store == "st03", table.c.type == "GENERAL")).all())

    want = (["balances", "order_counts", "order_counts_1m"],
            ["store", "type", "count", "revenue"], ["store", "type"],
            [(next(r["count"] for r in ORDERS if r["store"] == "st03"
                   and r["type"] == "GENERAL"),)])
    engine = sa.create_engine(f"postgresql+psycopg://{url}?sslmode=disable")
    try:
        with engine.connect() as conn:
            assert reflect(conn) == want
    finally:
        engine.dispose()

    async def on_asyncpg() -> Any:
        aengine = create_async_engine(f"postgresql+asyncpg://{url}?ssl=disable")
        try:
            async with aengine.connect() as aconn:
                return await aconn.run_sync(reflect)
        finally:
            await aengine.dispose()
    assert asyncio.run(on_asyncpg()) == want


def _pgjdbc(port: int, token: str) -> None:
    got = jdbc_client(port, token)
    errors = {k: v for k, v in got.items() if v.startswith("ERROR")}
    assert not errors, errors
    assert got["catalogs"] == "streamiq"
    assert got["schemas"] == "information_schema;pg_catalog;public"
    assert got["tables"] == "balances;order_counts;order_counts_1m"
    assert got["columns"] == ("account,varchar,0;balance,numeric,1;count,int8,1;"
                              "last_update,int8,1")
    assert got["primary_keys"] == "store,1,order_counts_pkey;type,2,order_counts_pkey"
    assert got["index_info"] == "order_counts_pkey,store;order_counts_pkey,type"
    assert got["type_info"] == "numeric,int8"
    lookups = []
    for i in range(7):  # the 5th and later in binary
        r = TRUTH[f"acc-00{i}"]
        stamp = r["last_update"] // 1000
        lookups.append(f"acc-00{i},{r['balance']},{r['count']},{stamp},"
                       f"{datetime.datetime.fromtimestamp(stamp, datetime.UTC).date()},"
                       f"{str(r['balance'] > 0).lower()},{r['count'] * 0.5}")
    assert got["lookup_binary"] == ";".join(lookups)
    assert got["big_decimal_param"] == ";".join(
        [a for a in ACCOUNTS if TRUTH[a]["balance"] > 390][:3])
    assert got["any_array"] == ";".join(f"{a},{TRUTH[a]['balance']}"
                                        for a in ("acc-001", "acc-002"))
    assert got["now"] == "true,streamiq"
    assert got["fetch_size"] == str(len(BAL))
    # Metabase: time zone, privileges, the probe, a sample, a field's values
    assert (got["mb_timezone"], got["mb_enums"]) == ("UTC", "")
    assert got["mb_privileges"] == "balances,true;order_counts,true;order_counts_1m,true"
    assert (got["mb_probe"], got["mb_sample"]) == ("0", str(len(BAL)))
    assert got["mb_field_values"] == "GENERAL;RESTAURANT"
    # DBeaver: the navigator's database, schemas, tables, columns, keys, indexes, data
    assert got["db_current"] == "streamiq|public,streamiq|public"
    assert got["db_schemas"] == "information_schema,pg_catalog,public"
    assert [t.split(":")[0] for t in got["db_tables"].split(",")] == [
        "balances", "order_counts", "order_counts_1m"]
    assert got["db_columns"] == ("store,1043,true;type,1043,true;count,20,false;"
                                 "revenue,701,false")
    assert got["db_constraints"] == "order_counts_pkey,p,{1,2}"
    assert got["db_indexes"] == "order_counts_pkey:true,store,type"
    assert got["db_data"] == str(len(BAL))
