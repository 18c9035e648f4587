"""``Queries``: every query type run through the coordinator, typed in, typed out.

One method per query type of ``model.py``, and ``run``, which dispatches any typed
query to its method (``RUNNERS``; a query type in a module of its own registers there
with ``runs``: ``topk.py``). One-partition queries (a key's row, a key's windows) are
answered where placement decides: here (the typed answer), by a replica (a row:
``Relayed``, its reply as it came; windows: typed again, ``Windows`` with hops 1), or
the ``Redirect`` or ``Refuse`` decided. Scatter-gathers (multi-get, scans, aggregates)
return ``Gathered`` (typed rows plus the partitions no replica could answer) to a
client's query, ``PeerPart`` to a peer's. A front end renders these; it never routes,
waits or merges itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from streamiq.errors import BadRequest, CutMoved, NotUpToBound
from streamiq.serving.cluster.peers import Ask
from streamiq.serving.cluster.placement import Here, Redirect, Refuse
from streamiq.serving.cluster.race import Relayed, Then
from streamiq.serving.engines._json import loads_row
from streamiq.serving.engines.aggregate import (
    aggregate_partitions,
    finish,
    merge_partials,
    parse_aggs,
    parse_group_by,
)
from streamiq.serving.engines.partials import AggregatePartial, MultiGetPartial, ScanPartial
from streamiq.serving.engines.scan import (
    KeyRange,
    cursor_cut,
    decode_cursor,
    encode_cursor,
    merge_rows,
    scan_partitions,
)
from streamiq.serving.query import codec
from streamiq.serving.query.answers import One
from streamiq.serving.query.gather import Gather
from streamiq.serving.query.model import (
    Aggregate,
    AggregateRows,
    Caller,
    Gathered,
    KeyResult,
    KeyWindows,
    Lookup,
    MultiGet,
    MultiGetRows,
    PeerPart,
    Query,
    Read,
    Scan,
    ScanRows,
    Windows,
    WindowScan,
)
from streamiq.serving.query.reads import Reads, check_key
from streamiq.state.base import Reader
from streamiq.views.base import View, window_bounds

__all__ = ["RUNNERS", "One", "Queries", "runs"]

log = logging.getLogger("streamiq.routing")

#: a one-partition query's answer: here (``T``), a replica's, or the decision
_ME = Caller()
Q = TypeVar("Q", bound=Query)
Runner = Callable[["Queries", Any, Caller], Awaitable[Any]]
#: how each query type is run (``Queries.run``)
RUNNERS: dict[type[Query], Runner] = {}


def runs(kind: type[Q]) -> Callable[[Callable[[Queries, Q, Caller], Awaitable[Any]]],
                                    Callable[[Queries, Q, Caller], Awaitable[Any]]]:
    """Register the function that runs queries of type ``kind``."""
    def register(fn: Callable[[Queries, Q, Caller], Awaitable[Any]]
                 ) -> Callable[[Queries, Q, Caller], Awaitable[Any]]:
        RUNNERS[kind] = fn
        return fn
    return register


class Queries(Reads):
    """The query types over this node and its peers (``caller``: who asks; by default
    a client of this node without credentials)."""

    async def run(self, q: Query, caller: Caller = _ME) -> Any:
        """Any typed query, by its type (what the peer server calls)."""
        runner = RUNNERS.get(type(q))
        if runner is None:
            raise BadRequest(f"no query of type {type(q).__name__}")
        return await runner(self, q, caller)

    async def lookup(self, q: Lookup, caller: Caller = _ME, tried: list[str] | None = None
                     ) -> Read | One:
        """A key's row (``tried``: replicas already asked, not asked again)."""
        view = self.view(q.view)
        if view.windowed:  # before any position wait or forwarding: the answer is known
            raise BadRequest(f"view {view.name!r} is windowed: use "
                             f"/v1/views/{view.name}/keys/{{key}}/windows")
        check_key(view, q.key)
        tokens = self.tokens(q.fresh.position)
        p = view.partition_of(q.key, self.node.partitions[view.name])
        deadline = self.deadline(caller, q.fresh)

        async def local(here: Here) -> Read:
            bound, wait = await self.bounded(view.name, q.fresh, tokens,
                                             self.wait_s(q.fresh.wait_ms, deadline))
            await self.check_position(view.name, p, bound, wait,
                                      q.key.encode())  # the store key of a keyed view
            return self.read(view, q.key, p, here)

        return await self.coordinator.route(self._ask(q, caller, deadline), caller.forwarded,
                                            view.name, p, self.max_lag(q.fresh.max_lag), local,
                                            tried)

    def forward(self, view: View, key: str, p: int, max_lag: int, owner: str,
                authorization: str | None, deadline: float, then: Then,
                loop: asyncio.AbstractEventLoop) -> None:
        """A plain key lookup that ``decide`` sent to ``owner`` (the lean path's), on
        callbacks: the one hedged call (``serving/cluster/race.py``), and when neither the
        owner nor its hedge answered, ``lookup``'s walk over the other replicas.
        ``then(answer, exc)`` runs once: ``Read`` (the hedge landed here), ``Relayed``,
        ``Redirect`` or ``Refuse``; or the exception."""
        tried = [owner]

        async def local(here: Here) -> Read:  # a hedge to this node (a standby)
            return self.read(view, key, p, here)

        def walk() -> Coroutine[Any, Any, Read | One]:
            return self.lookup(Lookup(view.name, key),
                               Caller(authorization, deadline=deadline), tried)

        self.coordinator.race(
            codec.lookup_ask(view.name, key, self.node.partitions[view.name], authorization,
                             deadline),
            view.name, p, max_lag, tried, local, then, loop, walk)

    async def key_windows(self, q: KeyWindows, caller: Caller = _ME
                          ) -> Windows | Redirect | Refuse:
        v = self._windowed(q.view)
        check_key(v, q.key)
        if q.fresh.consistent:
            raise BadRequest(f"view {v.name!r} is windowed: its reads have no cut",
                             field="consistent")
        if q.start > q.end:
            raise BadRequest(f"from {q.start} is after to {q.end}", field="from")
        p = v.partition_of(q.key, self.node.partitions[v.name])
        lo, hi = window_bounds(q.key, q.start, q.end)
        tokens = self.tokens(q.fresh.position)
        deadline = self.deadline(caller, q.fresh)

        async def local(here: Here) -> Windows:  # placed here: held (placement.py)
            bound, wait = await self.bounded(v.name, q.fresh, tokens,
                                             self.wait_s(q.fresh.wait_ms, deadline))
            await self.check_position(v.name, p, bound, wait)
            windows = [loads_row(raw) for _, raw in self.node.stores[v.name].scan(p, lo, hi)]
            return Windows(q.key, p, windows, self.stamp(v.name, p, here))

        got = await self.coordinator.route(self._ask(q, caller, deadline), caller.forwarded,
                                           v.name, p, self.max_lag(q.fresh.max_lag), local)
        return codec.windows(got.reply) if isinstance(got, Relayed) else got

    async def multi_get(self, q: MultiGet, caller: Caller = _ME
                        ) -> Gathered[MultiGetRows] | PeerPart[MultiGetPartial]:
        v = self.view(q.view)
        if v.windowed:
            raise BadRequest(f"view {v.name!r} is windowed: use /v1/views/{v.name}/windows",
                             field="view")
        keys = list(dict.fromkeys(q.keys))
        for i, k in enumerate(keys):
            check_key(v, k, f"keys[{i}]")
        n = self.node.partitions[v.name]
        part_of = {k: v.partition_of(k, n) for k in keys}
        g: Gather[MultiGetPartial] = Gather(self, q, v, caller)

        async def local(held: list[int], store: Reader) -> MultiGetPartial:
            here = set(held)
            mine = [k for k in keys if part_of[k] in here]
            by_p: dict[int, list[str]] = {}
            for k in mine:
                by_p.setdefault(part_of[k], []).append(k)
            found: dict[str, Any] = {}
            for p, ks in by_p.items():
                for k, raw in zip(ks, store.multi_get(p, [k.encode() for k in ks]), strict=True):
                    if raw is not None:
                        found[k] = loads_row(raw)
            return {"found": found, "keys": mine}

        def rows(partials: list[MultiGetPartial]) -> MultiGetRows:
            found = {k: r for part in partials for k, r in part["found"].items()}
            answered = {k for part in partials for k in part["keys"]}
            return MultiGetRows([KeyResult(k, part_of[k], k in found, found.get(k))
                                 for k in keys if k in answered],
                                [k for k in keys if k not in answered])

        wanted = sorted(set(part_of.values()) & set(g.all))
        return await g.run(local, rows, partitions=wanted, part=lambda ps: dataclasses.replace(
            q, keys=tuple(k for k in keys if part_of[k] in ps)))

    async def scan(self, q: Scan | WindowScan, caller: Caller = _ME
                   ) -> Gathered[ScanRows] | PeerPart[ScanPartial]:
        """A range or prefix scan (``Scan``), or a scan of windows (``WindowScan``)."""
        if isinstance(q, Scan):
            v = self.view(q.view)
            if q.start is not None and q.to is not None and q.start > q.to:
                raise BadRequest(f"from {q.start!r} is after to {q.to!r}", field="from")
            rng = KeyRange.build(q.start, q.to, q.prefix, self._after(v, q.cursor))
        else:
            v = self._windowed(q.view)
            if q.start > q.end:
                raise BadRequest(f"from {q.start} is after to {q.end}", field="from")
            rng = KeyRange.build(prefix=q.prefix, after=self._after(v, q.cursor),
                                 wfrom=q.start, wto=q.end)
        paged = self._page_cut(v, q)
        g: Gather[ScanPartial] = Gather(self, paged, v, caller)

        async def local(held: list[int], store: Reader) -> ScanPartial:
            return await asyncio.to_thread(scan_partitions, v, store, held, rng, paged.limit)

        def rows(partials: list[ScanPartial]) -> ScanRows:
            return ScanRows(*merge_rows(v, partials, paged.limit))

        try:
            got = await g.run(local, rows)
        except CutMoved as moved:
            if paged is q or caller.forwarded:
                raise
            raise NotUpToBound(f"the cut of this scan's first page can no longer be read "
                               f"({moved.message}): start the scan again",
                               served_by=self.node.endpoint) from None
        if isinstance(got, Gathered) and got.cut is not None and got.result.next_cursor:
            after = decode_cursor(v.name, got.result.next_cursor)  # the next page: this cut
            got = dataclasses.replace(got, result=dataclasses.replace(
                got.result, next_cursor=encode_cursor(v.name, after, got.cut)))
        return got

    @staticmethod
    def _page_cut(v: View, q: Scan | WindowScan) -> Scan | WindowScan:
        """A consistent scan's later page reads its first page's cut (its cursor's)."""
        if q.cursor is None or q.fresh.cut is not None:
            return q
        try:
            cut = cursor_cut(v.name, q.cursor)
        except ValueError as exc:
            raise BadRequest(str(exc), field="cursor") from None
        if cut is None:
            return q
        return dataclasses.replace(q, fresh=dataclasses.replace(q.fresh, consistent=True,
                                                                 cut=cut))

    async def aggregate(self, q: Aggregate, caller: Caller = _ME
                        ) -> Gathered[AggregateRows] | PeerPart[AggregatePartial]:
        v = self.view(q.view)
        try:
            cols = parse_group_by(v, list(q.group_by) or None)
            aggs = parse_aggs(v, list(q.aggs) or None)
        except ValueError as exc:
            raise BadRequest(str(exc), field=str(exc).split(":", 1)[0]) from None
        rng = KeyRange.build(prefix=q.prefix)
        g: Gather[AggregatePartial] = Gather(self, q, v, caller)

        async def local(held: list[int], store: Reader) -> AggregatePartial:
            return await asyncio.to_thread(aggregate_partitions, v, store, held, cols, aggs, rng)

        def rows(partials: list[AggregatePartial]) -> AggregateRows:
            merged, n = merge_partials(aggs, partials)
            return AggregateRows(cols, [a.name for a in aggs], finish(cols, aggs, merged), n)

        try:
            return await g.run(local, rows)
        except ValueError as exc:  # data that does not fit the aggregate (e.g. text sum)
            raise BadRequest(str(exc), field="agg") from None

    def _ask(self, q: Lookup | KeyWindows, caller: Caller, deadline: float) -> Ask:
        return codec.ask(q, caller.authorization, self.node.partitions[q.view], deadline)

    def _windowed(self, name: str) -> View:
        v = self.view(name)
        if not v.windowed:
            raise BadRequest(f"view {v.name!r} is not windowed: use /v1/views/{v.name}/scan "
                             f"or /v1/views/{v.name}/keys/{{key}}", field="view")
        return v

    @staticmethod
    def _after(v: View, cursor: str | None) -> bytes | None:
        """The store key a page resumes after (None: from the start)."""
        if cursor is None:
            return None
        try:
            return decode_cursor(v.name, cursor)
        except ValueError as exc:
            raise BadRequest(str(exc), field="cursor") from None


RUNNERS.update({Lookup: Queries.lookup, KeyWindows: Queries.key_windows,
                MultiGet: Queries.multi_get, Scan: Queries.scan, WindowScan: Queries.scan,
                Aggregate: Queries.aggregate})
