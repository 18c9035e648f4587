"""The catalog a session sees: a DuckDB database holding only empty tables shaped like
the views it may read (never data), with the ``pgshims`` so psql's ``\\dt``/``\\d``,
SQLAlchemy's reflection and Grafana's ``information_schema`` queries work.

It also describes statements: a view query run over the empty tables gives its result
columns and their types without reading a row (a prepared statement's Describe, and the
types of rows answered without DuckDB). One catalog per set of visible views, shared by
the sessions that see the same set (a few: tokens' scopes differ by view lists).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Sequence

import duckdb

from streamiq.serving.sql.duck import Answer, connect, duck_errors, in_thread, run_cursor
from streamiq.serving.sql.engine import ViewInfo
from streamiq.serving.sql.pgshims import AFTER_TABLES, SHIMS, rewrite
from streamiq.serving.sql.pgtables import key_row
from streamiq.serving.sql.types import duck_of_spark

__all__ = ["Catalog", "Catalogs", "Schema"]

#: a statement's result columns: (name, DuckDB type) in order
Schema = tuple[tuple[str, str], ...]
_SCHEMA = "public"
_DESCRIBED = 512  # statements whose schema a catalog remembers
#: DuckDB's bound for a catalog database. asyncpg's type introspection (a recursive CTE
#: joining pg_type, pg_range...) needs more than 61 MB of DuckDB's blocks: measured, it
#: failed at 64MB and ran at 128MB with ~20 MB more resident. The worker's share of
#: --sql-memory-mb still bounds what it really takes (catalogs never spill).
_MEMORY = "128MB"
#: a catalog answer's column types as PostgreSQL's catalog has them: its bigint lists are
#: oid[] (asyncpg decodes oid[] itself, and looks any other array type up in pg_type)
_CATALOG_TYPES = {"BIGINT[]": "OID[]"}


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _create(view: ViewInfo) -> str:
    cols = ", ".join(f"{_quote(c.name)} {duck_of_spark(c.type)}"
                     + (" NOT NULL" if c.name in view.key_columns else "")
                     for c in view.columns)
    return f"CREATE TABLE {_SCHEMA}.{_quote(view.name)} ({cols})"


def _key(view: ViewInfo) -> str:
    """The view's key columns as its primary key (pg_index, pg_constraint: ``pgtables``)."""
    return key_row(view.name, view.names, view.key_columns)


class Catalog:
    """The catalog database of one set of views."""

    def __init__(self, views: Sequence[ViewInfo]) -> None:
        self.views = {v.name: v for v in views}
        self._db = connect(_MEMORY, (*SHIMS, f"CREATE SCHEMA {_SCHEMA}", *map(_create, views),
                                    *map(_key, views), *AFTER_TABLES))
        self._described: OrderedDict[str, Schema] = OrderedDict()
        self._lock = threading.Lock()

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        cur = self._db.cursor()
        cur.execute(f"SET search_path = '{_SCHEMA},main'")
        return cur

    async def query(self, sql: str, limit: int) -> Answer:
        """A client's catalog query (PostgreSQL), rewritten for the shims."""
        cur = self._cursor()
        try:  # the rewrite too in the worker thread (sqlglot)
            answer = await in_thread(cur, lambda: run_cursor(cur, rewrite(sql), limit))
        finally:
            cur.close()
        answer.types = tuple(_CATALOG_TYPES.get(t, t) for t in answer.types)
        return answer

    def describe_catalog(self, sql: str) -> Schema:
        """The result columns of a client's catalog query (PostgreSQL, rewritten for the
        shims), as ``query`` answers them. Blocking, as ``describe``."""
        return tuple((name, _CATALOG_TYPES.get(t, t))
                     for name, t in self.describe(rewrite(sql)))

    def remembered(self, sql: str) -> Schema | None:
        """The result columns of ``sql`` if described before (never blocks on DuckDB)."""
        with self._lock:
            known = self._described.get(sql)
            if known is not None:
                self._described.move_to_end(sql)
            return known

    async def schema(self, sql: str) -> Schema:
        """``describe`` without blocking the event loop (remembered, or in a thread)."""
        known = self.remembered(sql)
        return known if known is not None else await asyncio.to_thread(self.describe, sql)

    def describe(self, sql: str) -> Schema:
        """The result columns of ``sql`` (DuckDB, over the views' tables), remembered.
        Blocking: on the event loop, ask ``remembered`` first."""
        known = self.remembered(sql)
        if known is not None:
            return known
        cur = self._cursor()
        try:
            with duck_errors():
                cur.execute(sql)  # over empty tables: no rows to read
                desc = cur.description or []
        finally:
            cur.close()
        schema = tuple((str(d[0]), str(d[1])) for d in desc)
        with self._lock:
            self._described[sql] = schema
            while len(self._described) > _DESCRIBED:
                self._described.popitem(last=False)
        return schema

    def close(self) -> None:
        self._db.close()


class Catalogs:
    """Catalogs by visible-view set, the least recently used forgotten past ``size``
    (closed when the last session using it lets it go)."""

    def __init__(self, size: int = 16) -> None:
        self._size = size
        self._by_views: OrderedDict[tuple[ViewInfo, ...], Catalog] = OrderedDict()

    def of(self, views: Sequence[ViewInfo]) -> Catalog:
        key = tuple(sorted(views, key=lambda v: v.name))
        cat = self._by_views.get(key)
        if cat is None:
            cat = self._by_views[key] = Catalog(key)
            while len(self._by_views) > self._size:
                self._by_views.popitem(last=False)
        self._by_views.move_to_end(key)
        return cat

    def close(self) -> None:
        for cat in self._by_views.values():
            cat.close()
        self._by_views.clear()
