"""One client's session: who it is, what it sees, its settings, its prepared statements,
and the statement running now (the target of a cancel request).

Statements are planned once (a plan cache per session, bounded by bytes; a prepared
statement keeps its plan), bound to their parameters per execution, and run as a task
that a cancel request interrupts (57014): an engine wait is cancelled, a worker's DuckDB
interrupted. Parsing and planning run in a SQL worker (``pool.py``, ``worker.py``:
``prepare_statement``), never on the node's loop; a session command (SET, SHOW,
BEGIN...) is read here. Every statement checks the session's token again first: one
that expired or changed ends the session (``SessionEnded``: FATAL 28P01, the connection
closed), whichever partitions the statement would read.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from streamiq.auth import Principal
from streamiq.errors import (
    BadRequest,
    BadSql,
    Canceled,
    StreamiqError,
    TooManyRows,
    Unauthenticated,
)
from streamiq.serving.sql.catalog import Schema
from streamiq.serving.sql.copyout import CopyOut, copy_statement
from streamiq.serving.sql.duck import Answer
from streamiq.serving.sql.engine import ViewInfo
from streamiq.serving.sql.execute import Context, Executor
from streamiq.serving.sql.guard import check_in_lists
from streamiq.serving.sql.planner import prepare as make_plan
from streamiq.serving.sql.plans import CatalogQuery, Plan, bind, unbound_sql
from streamiq.serving.sql.portals import CursorStatement, cursor_statement
from streamiq.serving.sql.remote import RemoteCatalog
from streamiq.serving.sql.settings import Settings, command_of

__all__ = ["INLINE_SPLIT", "NAMED", "NAMED_BYTES", "PLAN_BYTES", "Prepared", "Session",
           "SessionEnded", "prepare_statement"]

PLAN_BYTES = 2 << 20  # what a session's plan cache may hold (statements' texts and plans)
#: what a session's named prepared statements may hold (texts and plans), and how many
NAMED_BYTES, NAMED = 16 << 20, 1000
INLINE_SPLIT = 64 << 10  # a simple query longer than this is split in a worker
_PARAM = re.compile(r"\$(\d+)")
T = TypeVar("T")


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

    @property
    def size(self) -> int:
        """About what it holds in memory (its text, and a plan made of it)."""
        return 4 * len(self.sql) + 512


class SessionEnded(Exception):
    """The session cannot go on (its token expired): ``error`` is answered FATAL and the
    connection closed."""

    def __init__(self, error: StreamiqError) -> None:
        super().__init__(error.message)
        self.error = error


def _params(sql: str) -> int:
    return max((int(n) for n in _PARAM.findall(sql)), default=0)


def prepare_statement(sql: str, views: Sequence[ViewInfo], max_in_list: int) -> Prepared:
    """Parse and plan ``sql`` over ``views`` (a SQL worker runs this): its IN lists are
    counted first (``TooManyRows`` past ``max_in_list``), then sqlglot parses it."""
    copy = copy_statement(sql)
    if copy is not None:
        query = prepare_statement(copy.query, views, max_in_list)
        if query.plan is None:
            raise BadSql("COPY copies out a query's rows")
        return replace(query, sql=sql, copy=copy)
    cursor = cursor_statement(sql)
    if cursor is not None:
        if cursor.kind != "DECLARE":
            return Prepared(sql, cursor.kind, None, 0, cursor=cursor)
        query = prepare_statement(cursor.query, views, max_in_list)
        if query.plan is None:
            raise BadSql("a cursor is declared FOR a query")
        return replace(query, sql=sql, cursor=cursor)
    head = command_of(sql)
    if head:
        return Prepared(sql, head, None, _params(sql))
    check_in_lists(sql, max_in_list)
    plan, types = make_plan(sql, {v.name: v for v in views})
    return Prepared(sql, None, plan, _params(sql), types)


class Session:
    def __init__(self, principal: Principal, views: Sequence[ViewInfo], catalog: RemoteCatalog,
                 executor: Executor, process_id: int, secret: bytes,
                 statement_timeout_s: float = 30.0, authorization: str | None = None, *,
                 recheck: Callable[[], Awaitable[Principal]] | None = None,
                 max_in_list: int = 10_000) -> None:
        self.principal = principal
        self.authorization = authorization  # sent on with every read (owners check it)
        self.recheck = recheck  # the session's token checked again (None: never)
        self.views = {v.name: v for v in views}
        self.catalog = catalog
        self.executor = executor
        self.process_id = process_id
        self.secret = secret
        self.settings = Settings()
        self.statement_timeout_s = statement_timeout_s  # SET statement_timeout: lower only
        self.max_in_list = max_in_list
        self.last_active = time.monotonic()
        self._plans: OrderedDict[str, Prepared] = OrderedDict()
        self._plan_bytes = 0
        self._running: asyncio.Task[Answer] | None = None
        self._cancel = False
        self._busy = 0  # statements being parsed, described or run

    @property
    def idle_since(self) -> float | None:
        """Since when nothing runs for the session (monotonic; None: something does)."""
        return None if self._busy else self.last_active

    @asynccontextmanager
    async def _working(self) -> AsyncIterator[None]:
        """Parsing, describing or running a statement: not idle meanwhile."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1
            self.last_active = time.monotonic()

    async def check_token(self) -> None:
        """The session's token, checked again: expired, or its scopes changed (an API
        key's), the session ends (``SessionEnded``)."""
        if self.recheck is None:
            return
        try:
            who = await self.recheck()
        except Unauthenticated as exc:
            raise SessionEnded(Unauthenticated(
                f"the session's token is no longer valid ({exc.message}): connect again "
                "with a new one")) from None
        if who.scopes != self.principal.scopes:
            raise SessionEnded(Unauthenticated("the session's token changed its scopes: "
                                               "connect again"))

    async def split(self, text: str) -> list[str]:
        """A long simple query's statements, split in a SQL worker (the protocol splits
        one of at most ``INLINE_SPLIT`` characters itself)."""
        got: list[str] = await self.executor.workers.run("split", text)
        return got

    async def prepare(self, sql: str) -> Prepared:
        """Parse and plan ``sql`` (BadSql, UnknownView...), from the cache if seen; a new
        statement is planned in a SQL worker (sqlglot: about a millisecond)."""
        async with self._working():
            return await self._prepare(sql)

    async def _prepare(self, sql: str) -> Prepared:
        await self.check_token()
        known = self._plans.get(sql)
        if known is not None:
            self._plans.move_to_end(sql)
            return known
        head = command_of(sql)
        prepared: Prepared = (
            Prepared(sql, head, None, _params(sql)) if head else await self._timed(
                self.executor.workers.run("prepare", sql, tuple(self.views.values()),
                                          self.max_in_list)))
        self._remember(prepared)
        return prepared

    async def _timed(self, work: Awaitable[T]) -> T:
        """``work`` within the statement timeout (57014 past it): a parse or a
        description waits for a SQL worker, as a statement does."""
        try:
            async with asyncio.timeout(self.settings.timeout_s(self.statement_timeout_s)):
                return await work
        except TimeoutError:
            raise Canceled("canceling statement due to statement timeout") from None

    @staticmethod
    def may_keep(name: str, prepared: Prepared, named: Mapping[str, tuple[Prepared, Any]]
                 ) -> None:
        """``TooManyRows`` (54000) unless ``prepared`` may be kept as the named prepared
        statement ``name`` beside ``named`` (a connection's, the unnamed one aside): at
        most ``NAMED`` of them and ``NAMED_BYTES`` in all."""
        if not name:
            return
        others = [p for n, (p, _) in named.items() if n and n != name]
        if len(others) >= NAMED or sum(p.size for p in others) + prepared.size > NAMED_BYTES:
            raise TooManyRows(f"a session holds at most {NAMED} prepared statements and "
                              f"{NAMED_BYTES >> 20} MB of them: DEALLOCATE (Close) some",
                              limit=NAMED)

    def _remember(self, prepared: Prepared) -> None:
        if prepared.size > PLAN_BYTES // 4:
            return  # a statement this long is planned again if it comes again
        old = self._plans.pop(prepared.sql, None)
        self._plan_bytes += prepared.size - (old.size if old else 0)
        self._plans[prepared.sql] = prepared
        while self._plan_bytes > PLAN_BYTES:
            _, gone = self._plans.popitem(last=False)
            self._plan_bytes -= gone.size

    async def describe(self, prepared: Prepared) -> Schema | None:
        """The result columns (None: a command without rows); a statement not described
        yet is, over the catalog's empty tables, in a SQL worker."""
        if prepared.command == "SHOW":
            return ((self.settings.show(prepared.sql)[0], "VARCHAR"),)
        if prepared.plan is None:
            return None
        async with self._working():
            return await self._timed(self.catalog.schema(
                unbound_sql(prepared.plan.sql), isinstance(prepared.plan, CatalogQuery)))

    async def execute(self, prepared: Prepared, values: Sequence[Any] = ()) -> Answer:
        """Run a statement with its parameters, as a task a cancel can reach."""
        async with self._working():
            await self.check_token()
            if prepared.command is not None:
                return self._command(prepared)
            return await self._execute(prepared, values)

    async def _execute(self, prepared: Prepared, values: Sequence[Any]) -> Answer:
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
        self._running.add_done_callback(_retrieved)
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
        if ctx.cut is not None:
            self.settings.read_at(ctx.cut)
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


def _retrieved(task: asyncio.Task[Answer]) -> None:
    """A statement's task that a timeout or cancel left behind ends with an error nobody
    awaits: read here, so asyncio never logs it as never retrieved."""
    if not task.cancelled():
        task.exception()
