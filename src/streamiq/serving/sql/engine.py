"""What the SQL front end needs from the query engines: one small interface.

The node's engines (routed lookups, multi-gets, partition-pruned scans, the
scatter-gather aggregate) answer these calls; an adapter over them is all the wiring
takes, and the tests drive the front end with an in-memory fake.

Rows are the views' JSON rows as dicts (timestamps as epoch ms, window bounds as
``window_start``/``window_end`` epoch ms). ``missing`` names the partitions that could
not be reached: the session turns it into an error, or a NOTICE with
``SET streamiq.partial = on``. A lookup whose only partition is missing raises
``Unavailable`` instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from streamiq.auth import Principal
from streamiq.serving.query.model import Query

__all__ = ["Authenticate", "Bounds", "Column", "Engine", "Freshness", "Groups", "Row", "Rows",
           "ViewInfo"]

Row = Mapping[str, Any]

#: (user, password) -> who it is; raises ``Unauthenticated`` (password = streamiq token)
Authenticate = Callable[[str, str], Awaitable[Principal]]


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # Spark's simple type string (``bigint``, ``decimal(38,0)``); unknown: text


@dataclass(frozen=True)
class ViewInfo:
    """A view as a table: its columns in order (keys, window bounds, values)."""

    name: str
    key_columns: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


@dataclass(frozen=True)
class Freshness:
    """The session's consistency settings, as the HTTP API's query parameters, and its
    credential (``authorization``: ``Bearer <password>``), which owners check again."""

    position: str | None = None  # topic:partition:offset[,...]
    max_lag: int | None = None
    wait_ms: int | None = None
    authorization: str | None = field(default=None, repr=False)
    max_staleness_ms: int | None = None
    #: every read of a statement at one cut of the input (``streamiq.consistent``):
    #: ``cut``, chosen once for the statement (``Engine.cut``)
    consistent: bool = False
    cut: str | None = None


@dataclass(frozen=True)
class Bounds:
    """Keys from ``start`` (inclusive) to ``end`` (exclusive) and/or with ``prefix``."""

    prefix: str | None = None
    start: str | None = None
    end: str | None = None


@dataclass
class Rows:
    rows: Sequence[Row]
    missing: tuple[int, ...] = ()  # partitions not reached
    hops: int = field(default=0, compare=False)


@dataclass
class Groups:
    """One dict per group: the group columns, then one entry per aggregate name
    (``count(*)``, ``sum(count)``, ``avg(revenue)``: avg already finished)."""

    groups: Sequence[Row]
    missing: tuple[int, ...] = ()


class Engine(Protocol):
    async def views(self, principal: Principal) -> Sequence[ViewInfo]:
        """The views this principal may read (others do not exist for it)."""

    async def cut(self, views: Sequence[str], fresh: Freshness, settled: bool = True) -> str:
        """A cut of the input of ``views`` at or past the session's position, as a
        position token: one the node already reflects, at most a moment old
        (``settled``), else past every record appended before now."""

    async def lookup(self, view: str, key: str, fresh: Freshness) -> Rows:
        """One key (columns joined by ``|``): 0 or 1 row, one per window if windowed."""

    async def multi_get(self, view: str, keys: Sequence[str], fresh: Freshness) -> Rows:
        """Several keys, each asked of its owner once."""

    async def scan(self, view: str, bounds: Bounds, fresh: Freshness, limit: int) -> Rows:
        """Rows in key order, at most ``limit``, from the partitions' owners only."""

    async def aggregate(self, view: str, group_by: Sequence[str], aggs: Sequence[str],
                        prefix: str | None, fresh: Freshness) -> Groups:
        """The scatter-gather aggregate: each owner once; avg travels as [sum, count]."""

    async def run(self, query: Query, fresh: Freshness) -> Rows:
        """A query type's pushdown (``plans.Pushed``: a planner rule made ``query``), at
        the session's freshness: its result's rows (``result.rows``, each a key's
        ``value``)."""
