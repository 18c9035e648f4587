"""Top-k: the ``k`` rows with the largest (or smallest) value of a column, e.g. the 10
largest balances: a query type in one module.

Everything the query is lives here: its typed query (``TopK``, registered by its
``kind`` and so carried by the peer protocol as it is), each owner's part (the top
``k`` of the partitions it answers, read in a worker thread) and the merge of the parts
(the top ``k`` of the parts' rows). The front ends need only its declarations: its HTTP
route is made from its fields (``routes.TOP_K``, ``serving/http/declared.py``), SQL's
pushdown of ``ORDER BY column DESC LIMIT k`` is a planner rule
(``serving/sql/pushdowns.py``); the Python client asks its path (``client/aio.py``).

Order: numbers before text, each in its own order; ties by key, so every node and
every merge picks the same rows. Rows whose column is null or absent are left out (as
a ``WHERE column IS NOT NULL`` would), unless ``nulls`` is ``"first"`` or ``"last"``: then
they come before or after every value, as PostgreSQL orders them (SQL's pushdown asks
so: ``ORDER BY column DESC`` puts them first, ``ASC`` last).
"""

from __future__ import annotations

import asyncio
import heapq
from dataclasses import dataclass, field
from typing import Any, TypedDict

from streamiq.errors import BadRequest
from streamiq.serving.engines._json import loads_row
from streamiq.serving.engines.partials import ScannedRow
from streamiq.serving.engines.scan import KeyRange
from streamiq.serving.query.gather import Gather
from streamiq.serving.query.model import Caller, Gathered, PeerPart, Query
from streamiq.serving.query.run import Queries, runs
from streamiq.state.base import Reader
from streamiq.views.base import View

__all__ = ["MAX_K", "TopK", "TopKPartial", "TopKRows", "top_k"]

MAX_K = 1000


@dataclass(frozen=True)
class TopK(Query):
    """The ``k`` rows with the largest (``order="desc"``) or smallest (``"asc"``) value
    of ``column``, over keys with ``prefix``; rows without a value of it left out
    (``nulls="omit"``), or placed before (``"first"``) or after (``"last"``) the rest."""

    kind = "topk"
    column: str = field(metadata={"doc": "The column ranked."})
    k: int = field(default=10, metadata={"doc": f"How many rows (1..{MAX_K})."})
    order: str = field(default="desc", metadata={
        "doc": "desc: the largest values; asc: the smallest."})
    prefix: str | None = field(default=None, metadata={"doc": "Only keys starting with this."})
    nulls: str = field(default="omit", metadata={
        "doc": "Rows without a value of the column: omit, first or last."})


class TopKPartial(TypedDict):
    """An owner's top ``k`` rows of the partitions it answered, best first."""

    rows: list[ScannedRow]


@dataclass(frozen=True)
class TopKRows:
    column: str
    order: str
    rows: list[ScannedRow]
    count: int


def _rank(value: Any, key: str) -> tuple[int, Any, str] | None:
    """A row's place: numbers, then text; None for what has no place (null, a list...)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return 0, value, key
    if isinstance(value, str):
        return 1, value, key
    return None


def _best(rows: list[tuple[tuple[int, Any, str], ScannedRow]], k: int, order: str
          ) -> list[ScannedRow]:
    if order == "desc":  # the largest values; among equals, the smallest keys first
        best = heapq.nlargest(k, rows, key=lambda r: (r[0][0], r[0][1], _Desc(r[0][2])))
    else:
        best = heapq.nsmallest(k, rows, key=lambda r: r[0])
    return [row for _, row in best]


class _Desc:
    """A key compared in reverse (ties of a descending top-k go to the smaller key)."""

    __slots__ = ("s",)

    def __init__(self, s: str) -> None:
        self.s = s

    def __lt__(self, other: _Desc) -> bool:
        return self.s > other.s

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.s == other.s

    def __hash__(self) -> int:
        return hash(self.s)


def _ranked(view: View, q: TopK, key: str, row: dict[str, Any]) -> tuple[int, Any, str] | None:
    value = row.get(q.column)
    if value is None and q.column in view.key_columns:  # a key column the row leaves out
        value = view.parse_key(key).get(q.column)
    if value is None and q.nulls != "omit":  # before or after every value, either order
        return (2, 0, key) if (q.nulls == "first") == (q.order == "desc") else (-1, 0, key)
    return _rank(value, key)


def _part(view: View, store: Reader, partitions: list[int], q: TopK) -> TopKPartial:
    """The top ``k`` rows of ``partitions`` (each row decoded once, in a worker thread)."""
    rng = KeyRange.build(prefix=q.prefix)
    rows: list[tuple[tuple[int, Any, str], ScannedRow]] = []
    if not rng.empty:
        for p in partitions:
            for sk, raw in store.scan(p, rng.lo, rng.hi):
                key = (sk[:-9] if view.windowed else sk).decode(errors="replace")
                row = loads_row(raw)
                rank = _ranked(view, q, key, row)
                if rank is not None:
                    rows.append((rank, {"key": key, "partition": p, "value": row}))
    return {"rows": _best(rows, q.k, q.order)}


def _merge(view: View, parts: list[TopKPartial], q: TopK) -> TopKRows:
    """The top ``k`` of the parts' rows."""
    rows = [(rank, row) for part in parts for row in part["rows"]
            if (rank := _ranked(view, q, row["key"], row["value"])) is not None]
    best = _best(rows, q.k, q.order)
    return TopKRows(q.column, q.order, best, len(best))


@runs(TopK)
async def top_k(qs: Queries, q: TopK, caller: Caller
                ) -> Gathered[TopKRows] | PeerPart[TopKPartial]:
    """The top ``k`` rows of the view: each owner's top ``k``, merged."""
    v = qs.view(q.view)
    if q.column not in v.columns:
        raise BadRequest(f"column: {q.view!r} has no column {q.column!r} (it has "
                         f"{', '.join(v.columns)})", field="column")
    if not 1 <= q.k <= MAX_K:
        raise BadRequest(f"k: expected 1..{MAX_K}, got {q.k}", field="k")
    if q.order not in ("asc", "desc"):
        raise BadRequest(f"order: expected asc or desc, got {q.order!r}", field="order")
    if q.nulls not in ("omit", "first", "last"):
        raise BadRequest(f"nulls: expected omit, first or last, got {q.nulls!r}",
                         field="nulls")
    g: Gather[Any] = Gather(qs, q, v, caller)

    async def local(held: list[int], store: Reader) -> TopKPartial:
        return await asyncio.to_thread(_part, v, store, held, q)

    return await g.run(local, lambda parts: _merge(v, parts, q))
