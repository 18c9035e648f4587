"""What a SQL statement becomes: the reads pushed down to the owners and the SQL DuckDB
runs over their rows on the answering node (``planner`` makes them, ``execute`` runs them).

A prepared statement is planned once: each ``$n`` is a marker string in the plan
(``marker(n)``) and ``bind`` puts the values in, so one cached plan serves every
execution (planning costs ~1 ms of sqlglot; a bind, string replaces).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from streamiq.serving.query.model import Query
from streamiq.serving.sql.engine import Bounds
from streamiq.serving.sql.types import sql_literal

__all__ = ["AGG_TABLE", "Aggregate", "CatalogQuery", "Fetch", "Gather", "Lookup", "Plan", "Pushed",
           "Scan", "Source", "bind", "has_marker", "marker", "marker_number", "unbound_sql"]

#: the table the aggregate's groups are registered as for its post SQL
AGG_TABLE = "__agg"
_MARK = "\x1f"
_MARKED = re.compile(f"'{_MARK}(\\d+){_MARK}'")
_RAW = re.compile(f"{_MARK}(\\d+){_MARK}")


def marker(n: int) -> str:
    """The stand-in for parameter ``$n`` while planning (a string no client sends)."""
    return f"{_MARK}{n}{_MARK}"


def marker_number(text: str) -> int | None:
    """``n`` when ``text`` is exactly parameter ``$n``'s marker."""
    m = _RAW.fullmatch(text)
    return int(m.group(1)) if m else None


def has_marker(text: str) -> bool:
    """``text`` holds a parameter's marker (its value is known at Bind only)."""
    return _MARK in text


@dataclass(frozen=True)
class Lookup:
    """Routed point reads: one key a lookup, several a multi-get (one hop each)."""

    view: str
    keys: tuple[str, ...]


@dataclass(frozen=True)
class Scan:
    """A partition-pruned scan (owners only); no bounds: every row of the view; a
    ``limit``: any that many rows (``SELECT ... LIMIT n``, nothing else asked)."""

    view: str
    bounds: Bounds = field(default_factory=Bounds)
    limit: int | None = None


@dataclass(frozen=True)
class Pushed:
    """A query type's own pushdown (a planner rule made it: ``sql/rules.py``), e.g. the
    owners' top-k for ``ORDER BY column DESC LIMIT k``: the query layer runs ``query``
    (at the session's freshness) and its result's rows are the view's rows DuckDB then
    runs the statement over. A rule makes it of literals only: nothing to bind."""

    query: Query

    @property
    def view(self) -> str:
        return self.query.view


Source = Lookup | Scan | Pushed
#: (output column name, the row's column) when rows are the answer as they come
Direct = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Fetch:
    """One view's rows from a pushed-down source, then ``sql`` in DuckDB over them
    (the table named as the view), unless ``direct`` says the rows are the answer."""

    source: Source
    sql: str
    direct: Direct | None = None


@dataclass(frozen=True)
class Aggregate:
    """The owners' scatter-gather aggregate, then ``post_sql`` over its groups (table
    ``__agg``: group columns, one column per aggregate name), unless ``direct``."""

    view: str
    group_by: tuple[str, ...]
    aggs: tuple[str, ...]  # count(*), sum(count), avg(revenue): the HTTP API's names
    prefix: str | None
    post_sql: str
    agg_sql: str  # the pushdown as SQL (its result types are the groups' types)
    sql: str  # the whole statement (to describe it)
    direct: Direct | None = None


@dataclass(frozen=True)
class Gather:
    """Rows of each view (a pushed key filter where one applies), then ``sql``."""

    sources: tuple[Source, ...]
    sql: str


@dataclass(frozen=True)
class CatalogQuery:
    """Reads no view: answered from the catalog (pg_catalog over empty tables); ``sql``
    is PostgreSQL (``pgshims.rewrite`` makes it DuckDB's)."""

    sql: str


Plan = Fetch | Aggregate | Gather | CatalogQuery


def _sub(text: str, values: Sequence[Any], quoted: bool) -> str:
    def one(m: re.Match[str]) -> str:
        n = int(m.group(1))
        if n > len(values):
            raise IndexError(n)
        v = values[n - 1]
        return sql_literal(v) if quoted else ("" if v is None else str(v))
    text = _MARKED.sub(one, text) if quoted else text
    return _RAW.sub(one, text)


def _keys(template: str, values: Sequence[Any]) -> list[str]:
    """A key's values: one, or one per element of a list parameter (``= ANY($1)``)."""
    for m in _RAW.finditer(template):
        n = int(m.group(1))
        if n <= len(values) and isinstance(values[n - 1], list | tuple):
            head, tail = template[:m.start()], template[m.end():]
            return [k for v in dict.fromkeys(values[n - 1]) if v is not None
                    for k in _keys(head + str(v) + tail, values)]
    return [_sub(template, values, False)]


def _bind_source(s: Source, values: Sequence[Any]) -> Source:
    if isinstance(s, Pushed):  # of literals: nothing to bind
        return s
    if isinstance(s, Lookup):
        return Lookup(s.view, tuple(dict.fromkeys(k for t in s.keys for k in _keys(t, values))))
    b = s.bounds
    return Scan(s.view, Bounds(*(None if x is None else _sub(x, values, False)
                                 for x in (b.prefix, b.start, b.end))), s.limit)


def bind(plan: Plan, values: Sequence[Any]) -> Plan:
    """``plan`` with parameter ``$n`` = ``values[n - 1]`` everywhere (IndexError: a
    ``$n`` past the values given)."""
    if not values and _MARK not in repr(plan):
        return plan
    if isinstance(plan, CatalogQuery):
        return CatalogQuery(_sub(plan.sql, values, True))
    if isinstance(plan, Fetch):
        return dataclasses.replace(plan, source=_bind_source(plan.source, values),
                                   sql=_sub(plan.sql, values, True))
    if isinstance(plan, Gather):
        return Gather(tuple(_bind_source(s, values) for s in plan.sources),
                      _sub(plan.sql, values, True))
    prefix = None if plan.prefix is None else _sub(plan.prefix, values, False)
    return dataclasses.replace(plan, prefix=prefix, post_sql=_sub(plan.post_sql, values, True),
                               sql=_sub(plan.sql, values, True))


def unbound_sql(sql: str) -> str:
    """``sql`` with every parameter NULL (to describe a statement before its Bind)."""
    return _RAW.sub("NULL", _MARKED.sub("NULL", sql))
