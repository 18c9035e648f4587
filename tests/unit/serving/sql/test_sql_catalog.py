"""The catalog answers what psql, SQLAlchemy and Grafana ask on connect: their captured
queries replayed (catalog_queries.sql) against empty tables shaped like the views."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from sqlviews import BALANCES, VIEWS

from streamiq.serving.sql.catalog import Catalog, Catalogs
from streamiq.serving.sql.duck import Answer
from streamiq.serving.sql.planner import plan
from streamiq.serving.sql.plans import CatalogQuery

CAPTURED = [q.strip() for q in (Path(__file__).parent / "catalog_queries.sql").read_text()
            .split("\n;;\n") if q.strip() and not q.lstrip().startswith("--")]


def _ask(catalog: Catalog, sql: str) -> Answer:
    p = plan(sql, catalog.views)
    assert isinstance(p, CatalogQuery)
    return asyncio.run(catalog.query(p.sql, 1000))


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog(list(VIEWS.values()))


def test_every_captured_client_query_runs(catalog: Catalog) -> None:
    assert len(CAPTURED) >= 30
    for sql in CAPTURED:
        assert _ask(catalog, sql).rows is not None, sql


def test_psql_dt_lists_the_views(catalog: Catalog) -> None:
    dts = [q for q in CAPTURED if '"Schema"' in q and '"Name"' in q and '"Type"' in q]
    assert len(dts) >= 2  # psql's \dt and \d (\dt+ names its columns so too)
    for dt in dts:
        rows = _ask(catalog, dt).rows or []
        assert [r[:4] for r in rows] == [("public", "balances", "table", "streamiq"),
                                         ("public", "order_counts", "table", "streamiq")]


def test_psql_d_describes_a_view(catalog: Catalog) -> None:
    find = next(q for q in CAPTURED if "'^(balances)$'" in q)
    rows = _ask(catalog, find).rows
    assert rows is not None and [r[1:] for r in rows] == [("public", "balances")]
    oid = rows[0][0]
    columns = _ask(catalog, "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod),"
                   f" a.attnotnull FROM pg_catalog.pg_attribute a WHERE a.attrelid = '{oid}'"
                   " AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum")
    assert columns.rows == [("account", "character varying", True),
                            ("balance", "numeric", False), ("count", "bigint", False)]


def test_grafana_lists_tables_and_columns_with_postgresql_type_names(catalog: Catalog) -> None:
    tables, columns = (q for q in CAPTURED if "quote_ident" in q.lower())
    assert _ask(catalog, tables).rows == [("balances",), ("order_counts",)]
    assert _ask(catalog, columns).rows == [
        ("store", "character varying"), ("type", "character varying"), ("count", "bigint"),
        ("revenue", "double precision")]


def test_sqlalchemy_asks_version_and_schema(catalog: Catalog) -> None:
    assert _ask(catalog, "select pg_catalog.version()").rows == [
        ("PostgreSQL 16.0 (streamiq)",)]
    assert _ask(catalog, "select current_schema()").rows == [("public",)]


def test_the_catalog_holds_no_data_and_only_the_visible_views() -> None:
    only = Catalogs().of([BALANCES])
    assert only.describe("SELECT count(*) FROM balances") == (("count_star()", "BIGINT"),)
    assert asyncio.run(only.query("SELECT count(*) FROM public.balances", 10)).rows == [(0,)]
    got = _ask(only, "SELECT table_name FROM information_schema.tables")
    assert got.rows == [("balances",)]


def test_describe_types_a_statement_without_rows(catalog: Catalog) -> None:
    assert catalog.describe("SELECT account, balance * 2 AS dbl, count FROM balances") == (
        ("account", "VARCHAR"), ("dbl", "DECIMAL(38,0)"), ("count", "BIGINT"))


def test_asyncpg_type_introspection_runs_without_spilling(catalog: Catalog) -> None:
    """asyncpg looks a parameter's array or numeric type up with a recursive query over
    pg_type and pg_range; a catalog never spills, so DuckDB's bound must hold it (at
    64MB it failed: 'could not allocate block ... 61.0 MiB used')."""
    from asyncpg import introspection

    from streamiq.serving.sql.plans import bind
    from streamiq.serving.sql.session import prepare_statement

    for query in (introspection.INTRO_LOOKUP_TYPES_13, introspection.INTRO_LOOKUP_TYPES):
        prepared = prepare_statement(query, list(VIEWS.values()), 10_000)
        assert isinstance(prepared.plan, CatalogQuery)
        answer = asyncio.run(catalog.query(bind(prepared.plan, [[1700, 20]]).sql, 1000))
        names = {row[2] for row in answer.rows or []}
        assert {"numeric", "int8"} <= names, answer.rows
