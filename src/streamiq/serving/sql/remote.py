"""The catalog as a node's sessions use it: the views a session sees, answered by the SQL
workers (``pool.py``), which hold the catalog's DuckDB databases (``catalog.Catalog``).

A client's catalog query and a statement's description run in a worker; what a
statement's result columns are is remembered here, on the node, so a prepared statement's
rows are typed without asking again (``remembered``, read on the event loop). One
``RemoteCatalog`` per set of visible views (``RemoteCatalogs``), its memory bounded by
bytes: a statement's text is its key, and texts can be long.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from streamiq.serving.sql.catalog import Schema
from streamiq.serving.sql.duck import Answer
from streamiq.serving.sql.engine import ViewInfo
from streamiq.serving.sql.pool import SqlWorkers

__all__ = ["RemoteCatalog", "RemoteCatalogs"]

_REMEMBERED_BYTES = 4 << 20  # texts and schemas a catalog remembers


def _size(sql: str, schema: Schema) -> int:
    return 2 * len(sql) + sum(len(n) + len(t) + 64 for n, t in schema) + 128


class RemoteCatalog:
    """The catalog of one set of views, in the workers."""

    def __init__(self, views: Sequence[ViewInfo], workers: SqlWorkers,
                 remembered_bytes: int = _REMEMBERED_BYTES) -> None:
        self.key = tuple(sorted(views, key=lambda v: v.name))
        self.views = {v.name: v for v in self.key}
        self.workers = workers
        self.remembered_bytes = remembered_bytes
        self._described: OrderedDict[str, tuple[Schema, int]] = OrderedDict()
        self._bytes = 0

    async def query(self, sql: str, limit: int) -> Answer:
        """A client's catalog query (PostgreSQL), rewritten for the shims in a worker."""
        answer: Answer = await self.workers.run("catalog", self.key, sql, limit)
        return answer

    def remembered(self, sql: str) -> Schema | None:
        """The result columns of ``sql`` if described before."""
        known = self._described.get(sql)
        if known is None:
            return None
        self._described.move_to_end(sql)
        return known[0]

    async def schema(self, sql: str, catalog: bool = False) -> Schema:
        """The result columns of ``sql`` (DuckDB over the views' empty tables, in a
        worker), remembered; ``catalog``: a catalog query (PostgreSQL, rewritten for the
        shims first)."""
        known = self.remembered(sql)
        if known is not None:
            return known
        schema: Schema = await self.workers.run("describe", self.key, sql, catalog)
        size = _size(sql, schema)
        if size <= self.remembered_bytes // 4:
            self._described[sql] = (schema, size)
            self._bytes += size
            while self._bytes > self.remembered_bytes:
                _, (_, gone) = self._described.popitem(last=False)
                self._bytes -= gone
        return schema


class RemoteCatalogs:
    """Catalogs by visible-view set, the least recently used forgotten past ``size``."""

    def __init__(self, workers: SqlWorkers, size: int = 16) -> None:
        self.workers = workers
        self._size = size
        self._by_views: OrderedDict[tuple[ViewInfo, ...], RemoteCatalog] = OrderedDict()

    def of(self, views: Sequence[ViewInfo]) -> RemoteCatalog:
        key = tuple(sorted(views, key=lambda v: v.name))
        cat = self._by_views.get(key)
        if cat is None:
            cat = self._by_views[key] = RemoteCatalog(key, self.workers)
            while len(self._by_views) > self._size:
                self._by_views.popitem(last=False)
        self._by_views.move_to_end(key)
        return cat
