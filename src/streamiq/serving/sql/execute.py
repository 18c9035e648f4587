"""A plan run: the pushed-down reads through the engine, then DuckDB for what is left.

Rows answered without DuckDB (``direct``) are typed from the statement's description
over the catalog's empty tables, so they look exactly as DuckDB would hand them back.
Everything DuckDB runs, runs in a SQL worker (``pool.py``); a statement that gathers
rows for it holds its worker from the first read, so at most as many statements gather
at once as there are workers for long requests, and at most ``--sql-workers`` of a
node's scans and aggregates run for SQL at once (their reads run in the node's threads,
as HTTP's do). Every read is bounded: a gather past
``max_gather`` rows and an answer past ``max_rows`` are ``TooManyRows`` (54000; a
direct answer reads at most ``max_rows`` + 1). Partitions a read could not reach fail
the statement (57P03) or, with ``streamiq.partial = on``, become a NOTICE.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from streamiq.errors import CutMoved, NotUpToBound, TooManyRows, Unavailable
from streamiq.serving.changelog.consistency import parse_tokens
from streamiq.serving.changelog.cuts import Cut, cut_of, cut_token
from streamiq.serving.changelog.rounds import at_one_cut
from streamiq.serving.sql.catalog import Schema
from streamiq.serving.sql.duck import Answer
from streamiq.serving.sql.engine import Engine, Freshness, Groups, Row, Rows, ViewInfo
from streamiq.serving.sql.plans import (
    AGG_TABLE,
    Aggregate,
    CatalogQuery,
    Direct,
    Fetch,
    Gather,
    Lookup,
    Plan,
    Pushed,
    Scan,
    Source,
)
from streamiq.serving.sql.pool import SqlWorkers, Worker
from streamiq.serving.sql.remote import RemoteCatalog
from streamiq.serving.sql.stats import SqlStats
from streamiq.serving.sql.types import coerce, duck_of_spark

__all__ = ["Context", "Executor", "Limits"]


@dataclass(frozen=True)
class Limits:
    max_rows: int = 10_000  # rows an answer may return
    max_gather: int = 100_000  # rows a statement may gather from the owners


@dataclass
class Context:
    """What one statement runs with: the session's catalog and settings."""

    catalog: RemoteCatalog
    fresh: Freshness
    partial: bool = False
    #: the statement's result columns, described once before its parameters were bound
    #: (rows answered without DuckDB are typed by it; None: described here)
    schema: Schema | None = None
    notices: list[str] = field(default_factory=list)
    #: the cut a consistent statement read (``Executor.run`` sets it)
    cut: str | None = None


def _direct_rows(direct: Direct, schema: Schema, rows: Sequence[Row]) -> list[tuple[Any, ...]]:
    convs = [(col, coerce(duck)) for (_, col), (_, duck) in zip(direct, schema, strict=True)]
    return [tuple(None if (v := r.get(col)) is None else conv(v) for col, conv in convs)
            for r in rows]


class Executor:
    def __init__(self, engine: Engine, workers: SqlWorkers, limits: Limits | None = None,
                 stats: SqlStats | None = None) -> None:
        self.engine = engine
        self.workers = workers
        self.limits = limits or Limits()
        self.stats = stats
        #: scans and aggregates SQL runs at once: their owners' parts read the stores in
        #: the node's threads, which HTTP's scans and aggregates use too
        self._reads = asyncio.Semaphore(workers.size)

    async def run(self, plan: Plan, ctx: Context) -> Answer:
        if self.stats is not None:
            self.stats.ran(plan)
        if ctx.fresh.consistent and not isinstance(plan, CatalogQuery):
            return await self._at_one_cut(plan, ctx)
        return await self._run(plan, ctx)

    async def _at_one_cut(self, plan: Fetch | Aggregate | Gather, ctx: Context) -> Answer:
        """Every read of the statement at one cut of its views' input: chosen here (or
        the transaction's), asked again lower (or anew) when a replica cannot read it."""
        views = [plan.view] if isinstance(plan, Aggregate) else [
            s.view for s in ((plan.source,) if isinstance(plan, Fetch) else plan.sources)]
        given = ctx.fresh.cut
        if given is not None:  # the transaction's: that one only
            try:
                answer = await self._run(plan, replace(ctx, fresh=replace(ctx.fresh, cut=given)))
            except CutMoved as moved:
                raise NotUpToBound(f"the transaction's cut can no longer be read ("
                                   f"{moved.message}): begin a new transaction") from None
            ctx.cut = given
            return answer

        async def attempt(cut: Cut) -> Answer:
            return await self._run(plan, replace(ctx, fresh=replace(ctx.fresh,
                                                                    cut=cut_token(cut))))

        async def anew() -> Cut:
            return cut_of(parse_tokens(await self.engine.cut(views, ctx.fresh, settled=False)))

        first = cut_of(parse_tokens(await self.engine.cut(views, ctx.fresh)))
        answer, cut = await at_one_cut(first, attempt, anew, "the statement's input")
        ctx.cut = cut_token(cut)
        return answer

    async def _run(self, plan: Plan, ctx: Context) -> Answer:
        if isinstance(plan, CatalogQuery):
            return await ctx.catalog.query(plan.sql, self.limits.max_rows)
        if isinstance(plan, Aggregate):
            return await self._aggregate(plan, ctx)
        if isinstance(plan, Fetch) and plan.direct is not None:  # the rows are the answer:
            cap = self.limits.max_rows if isinstance(plan.source, Scan) else (  # read no more
                self.limits.max_gather)
            rows = await self._read(plan.source, ctx, cap)
            return self._answer(plan.direct, ctx.schema or await ctx.catalog.schema(
                plan.sql), rows)
        sources = (plan.source,) if isinstance(plan, Fetch) else plan.sources
        async with self.workers.hold() as worker:
            gathered = {s.view: await self._read(s, ctx, self.limits.max_gather)
                        for s in sources}
            return await self._duck(worker, plan.sql, gathered, ctx)

    def _answer(self, direct: Direct, schema: Schema, rows: Sequence[Row]) -> Answer:
        self._bound_answer(len(rows))
        return Answer(tuple(n for n, _ in schema), tuple(t for _, t in schema),
                      _direct_rows(direct, schema, rows))

    def _bound_answer(self, n: int) -> None:
        if n > self.limits.max_rows:
            raise TooManyRows(f"the result has more than {self.limits.max_rows} rows (the "
                              "row limit); add a LIMIT or narrow the WHERE",
                              limit=self.limits.max_rows)

    async def _duck(self, worker: Worker, sql: str, gathered: dict[str, Sequence[Row]],
                    ctx: Context) -> Answer:
        views = ctx.catalog.views
        tables = {name: (self._columns(views[name]), list(rows))
                  for name, rows in gathered.items()}
        answer: Answer = await worker.call("duck", (sql, tables, self.limits.max_rows))
        return answer

    @staticmethod
    def _columns(view: ViewInfo) -> list[tuple[str, str]]:
        return [(c.name, duck_of_spark(c.type)) for c in view.columns]

    async def _read(self, source: Source, ctx: Context, cap: int) -> Sequence[Row]:
        """``source``'s rows, at most ``cap`` (more: ``TooManyRows``)."""
        if isinstance(source, Lookup):
            if len(source.keys) > cap:
                raise TooManyRows(f"{len(source.keys)} keys asked of {source.view}, more "
                                  f"than {cap} (the gather limit)", limit=cap)
            if len(source.keys) == 1:
                got = await self.engine.lookup(source.view, source.keys[0], ctx.fresh)
            else:
                got = await self.engine.multi_get(source.view, source.keys, ctx.fresh)
        elif isinstance(source, Pushed):  # as many rows as its rule bounds them to
            async with self._reads:
                got = await self.engine.run(source.query, ctx.fresh)
        else:
            async with self._reads:
                got = await self.engine.scan(source.view, source.bounds, ctx.fresh,
                                             min(cap + 1, source.limit or cap + 1))
            if len(got.rows) > cap:
                what = ("the row limit" if cap == self.limits.max_rows
                        else "the gather limit")
                raise TooManyRows(f"the statement would read more than {cap} rows of "
                                  f"{source.view} ({what}): narrow the WHERE on its key, "
                                  "or GROUP BY to aggregate on the owners",
                                  limit=cap, view=source.view)
        self._missing(source.view, got, ctx)
        return got.rows

    @staticmethod
    def _missing(view: str, got: Rows | Groups, ctx: Context) -> None:
        if not got.missing:
            return
        parts = ", ".join(map(str, sorted(got.missing)))
        if not ctx.partial:
            raise Unavailable(f"partitions {parts} of {view} could not be reached (SET "
                              "streamiq.partial = on to answer with the others)",
                              view=view, partitions=sorted(got.missing))
        ctx.notices.append(f"partial answer: partitions {parts} of {view} are missing")

    async def _aggregate(self, plan: Aggregate, ctx: Context) -> Answer:
        async with self._reads:
            got = await self.engine.aggregate(plan.view, plan.group_by, plan.aggs,
                                              plan.prefix, ctx.fresh)
        self._missing(plan.view, got, ctx)
        if plan.direct is not None:
            return self._answer(plan.direct, ctx.schema or await ctx.catalog.schema(plan.sql),
                                got.groups)
        columns = await ctx.catalog.schema(plan.agg_sql)
        answer: Answer = await self.workers.run(
            "duck", plan.post_sql, {AGG_TABLE: (list(columns), list(got.groups))},
            self.limits.max_rows)
        return answer
