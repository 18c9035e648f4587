"""One client's session: who it is, what it sees, its settings, its prepared statements,
and the statement running now (the target of a cancel request).

Statements are planned once (a plan cache per session; a prepared statement keeps its
plan), bound to their parameters per execution, and run as a task that a cancel request
interrupts (57014): an engine wait is cancelled, a DuckDB cursor interrupted.
"""

from __future__ import annotations

import asyncio
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from streamiq.auth import Principal
from streamiq.errors import BadRequest, BadSql, Canceled
from streamiq.serving.sql.catalog import Catalog, Schema
from streamiq.serving.sql.copyout import CopyOut, copy_statement
from streamiq.serving.sql.duck import Answer
from streamiq.serving.sql.engine import ViewInfo
from streamiq.serving.sql.execute import Context, Executor
from streamiq.serving.sql.planner import prepare as make_plan
from streamiq.serving.sql.plans import CatalogQuery, Plan, bind, unbound_sql
from streamiq.serving.sql.portals import CursorStatement, cursor_statement
from streamiq.serving.sql.settings import Settings, command_of

__all__ = ["Prepared", "Session"]

_PLANS = 256  # statements a session keeps planned
_PARAM = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class Prepared:
    """A parsed statement: a session command (``command``), a planned query, a cursor
    command (``cursor``; a DECLARE's ``plan`` is its query's) or a COPY out."""

    sql: str
    command: str | None
    plan: Plan | None
    params: int  # how many $n it takes
    param_types: tuple[int, ...] = ()  # their type oids, as the statement uses them
    cursor: CursorStatement | None = None
    copy: CopyOut | None = None  # COPY (query) TO STDOUT: its ``plan`` is the query's


class Session:
    def __init__(self, principal: Principal, views: Sequence[ViewInfo], catalog: Catalog,
                 executor: Executor, process_id: int, secret: bytes,
                 statement_timeout_s: float = 300.0, authorization: str | None = None) -> None:
        self.principal = principal
        self.authorization = authorization  # sent on with every read (owners check it)
        self.views = {v.name: v for v in views}
        self.catalog = catalog
        self.executor = executor
        self.process_id = process_id
        self.secret = secret
        self.settings = Settings()
        self.statement_timeout_s = statement_timeout_s  # SET statement_timeout: lower only
        self._plans: OrderedDict[str, Prepared] = OrderedDict()
        self._running: asyncio.Task[Answer] | None = None
        self._cancel = False

    async def prepare(self, sql: str) -> Prepared:
        """Parse and plan ``sql`` (BadSql, UnknownView...), from the cache if seen; a new
        statement is planned in a worker thread (sqlglot: about a millisecond)."""
        known = self._plans.get(sql)
        if known is not None:
            self._plans.move_to_end(sql)
            return known
        prepared = await asyncio.to_thread(self._plan, sql)
        self._plans[sql] = prepared
        while len(self._plans) > _PLANS:
            self._plans.popitem(last=False)
        return prepared

    def _plan(self, sql: str) -> Prepared:
        params = max((int(n) for n in _PARAM.findall(sql)), default=0)
        copy = copy_statement(sql)
        if copy is not None:
            query = self._plan(copy.query)
            if query.plan is None:
                raise BadSql("COPY copies out a query's rows")
            return replace(query, sql=sql, copy=copy)
        cursor = cursor_statement(sql)
        if cursor is not None:
            if cursor.kind != "DECLARE":
                return Prepared(sql, cursor.kind, None, 0, cursor=cursor)
            query = self._plan(cursor.query)
            if query.plan is None:
                raise BadSql("a cursor is declared FOR a query")
            return replace(query, sql=sql, cursor=cursor)
        head = command_of(sql)
        if head:
            return Prepared(sql, head, None, params)
        plan, types = make_plan(sql, self.views)
        return Prepared(sql, None, plan, params, types)

    async def describe(self, prepared: Prepared) -> Schema | None:
        """The result columns (None: a command without rows); a statement not described
        yet is, over the catalog's empty tables, in a worker thread."""
        if prepared.command == "SHOW":
            return ((self.settings.show(prepared.sql)[0], "VARCHAR"),)
        if prepared.plan is None:
            return None
        sql = unbound_sql(prepared.plan.sql)
        if isinstance(prepared.plan, CatalogQuery):
            return await self.catalog.catalog_schema(sql)
        return await self.catalog.schema(sql)

    async def execute(self, prepared: Prepared, values: Sequence[Any] = ()) -> Answer:
        """Run a statement with its parameters, as a task a cancel can reach."""
        if prepared.command is not None:
            return self._command(prepared)
        assert prepared.plan is not None
        try:
            bound = bind(prepared.plan, values)
        except IndexError:
            raise BadRequest(f"the statement takes {prepared.params} parameter(s), "
                             f"{len(values)} given") from None
        direct = getattr(prepared.plan, "direct", None) is not None
        fresh = replace(self.settings.fresh, authorization=self.authorization)
        ctx = Context(self.catalog, fresh, self.settings.partial,
                      await self.describe(prepared) if direct else None)
        self._cancel = False
        self._running = asyncio.create_task(self._run(bound, ctx))
        try:
            async with asyncio.timeout(self.settings.timeout_s(self.statement_timeout_s)):
                return await self._running
        except TimeoutError:
            raise Canceled("canceling statement due to statement timeout") from None
        except asyncio.CancelledError:
            if not self._cancel:
                raise  # the connection is closing, not a cancel request
            raise Canceled("canceling statement due to user request") from None
        finally:
            self._running = None

    async def _run(self, plan: Plan, ctx: Context) -> Answer:
        answer = await self.executor.run(plan, ctx)
        answer.notices.extend(ctx.notices)
        return answer

    def _command(self, prepared: Prepared) -> Answer:
        if prepared.command == "SHOW":
            name, value = self.settings.show(prepared.sql)
            return Answer((name,), ("VARCHAR",), [(value,)], "SHOW")
        return Answer.command(self.settings.command(prepared.command or "", prepared.sql))

    @property
    def running(self) -> bool:
        return self._running is not None and not self._running.done()

    def cancel(self) -> bool:
        """A cancel request: interrupt the running statement (if one runs)."""
        if self._running is None or not self.running:
            return False
        self._cancel = True
        self._running.cancel()
        return True
