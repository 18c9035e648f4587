"""The SQL front end's ``Engine`` over a node: its views, its token check and the query
layer (``serving/query/``), so a statement is routed, forwarded and gathered exactly as
the HTTP API's requests are.

A lookup is one ``Queries.lookup`` (the one placement decision: answered here, relayed
from one replica, or refused); a windowed view's key is its ``KeyWindows``. Multi-gets,
scans and aggregates are the query layer's scatter-gathers: typed rows plus the
partitions no replica answered; so is a query type's pushdown (``run``: a planner rule
made the query, e.g. ``ORDER BY column LIMIT k``'s top-k), whatever its type. The
session's credential goes to the owners with every query (``Caller.authorization``),
which check it as they check an HTTP client's.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from streamiq.auth import Authenticator, Principal
from streamiq.serving.engines.scan import MAX_LIMIT
from streamiq.serving.query import codec
from streamiq.serving.query import model as q
from streamiq.serving.query.answers import PeerReply, Redirect, Refuse, Relayed
from streamiq.serving.query.model import MAX_KEYS
from streamiq.serving.query.run import Queries
from streamiq.serving.sql.engine import Bounds, Column, Freshness, Groups, Row, Rows, ViewInfo
from streamiq.views.base import View

__all__ = ["NodeEngine", "view_info"]

_WINDOW = ("window_start", "window_end")
_AT_ONCE = 64  # a windowed view's keys looked up at once by one statement
T = TypeVar("T")


def view_info(view: View) -> ViewInfo:
    """``view`` as a table: keys are text, window bounds epoch ms, values their Spark
    types where the view declares them (else text)."""
    def type_of(c: str) -> str:
        if c in _WINDOW:
            return "bigint"
        return view.types.get(c, "string" if c in view.key_columns else "text")
    return ViewInfo(view.name, view.key_columns,
                    tuple(Column(c, type_of(c)) for c in view.columns))


class NodeEngine:
    """``engine.Engine`` over this node's ``Queries`` (and ``authenticate``: its
    clients' token check on the password)."""

    def __init__(self, queries: Queries, auth: Authenticator) -> None:
        self.queries = queries
        self.auth = auth

    async def authenticate(self, user: str, password: str) -> Principal:
        """The password is a streamiq token (a JWT or an API key), as over HTTP."""
        return self.auth.principal(f"Bearer {password}" if password else None)

    async def views(self, principal: Principal) -> Sequence[ViewInfo]:
        views = self.queries.node.views
        return [view_info(v) for name, v in sorted(views.items()) if principal.may_read(name)]

    async def cut(self, views: Sequence[str], fresh: Freshness, settled: bool = True) -> str:
        return await self.queries.new_cut(views, fresh.position, fresh.wait_ms,
                                          field="streamiq.consistent", settled=settled)

    async def lookup(self, view: str, key: str, fresh: Freshness) -> Rows:
        """The key's row (or windows): here, relayed from one replica, or refused. In
        redirect mode (a client is sent to the owner: SQL cannot be) the owner is asked
        as a gather's part instead, still one hop. At a cut: a multi-get of the key."""
        if fresh.cut is not None and not self.queries.view(view).windowed:
            return await self.multi_get(view, [key], fresh)
        caller, f = _caller(fresh), _fresh(fresh)
        if self.queries.view(view).windowed:
            got = await self.queries.key_windows(q.KeyWindows(view, key, fresh=f), caller)
            if isinstance(got, q.Windows):
                return Rows(got.windows)
            if isinstance(got, Redirect):
                return await self.scan(view, Bounds(key, key, key + "\x00"), fresh, q.FAR)
            return Rows(codec.windows(_relayed(got)).windows, hops=1)
        found = await self.queries.lookup(q.Lookup(view, key, fresh=f), caller)
        if isinstance(found, q.Read):
            return Rows([] if found.row is None else [found.row])
        if isinstance(found, Redirect):
            return await self.multi_get(view, [key], fresh)
        row = codec.read(_relayed(found)).row
        return Rows([] if row is None else [row], hops=1)

    async def multi_get(self, view: str, keys: Sequence[str], fresh: Freshness) -> Rows:
        """Each key's row: chunks of what one request to a peer may ask (``MAX_KEYS``),
        a few at once; a windowed view's keys each looked up, ``_AT_ONCE`` at a time."""
        if self.queries.view(view).windowed:  # each key's windows, from its owner
            each = await _few_at_once([partial(self.lookup, view, k, fresh) for k in keys],
                                      _AT_ONCE)
            return Rows([r for got in each for r in got.rows], hops=sum(g.hops for g in each))
        parts = await _few_at_once([partial(self.queries.multi_get, q.MultiGet(
            view, tuple(keys[i:i + MAX_KEYS]), fresh=_fresh(fresh)), _caller(fresh))
            for i in range(0, len(keys), MAX_KEYS)], 4)
        out = Rows([])
        for part in parts:
            g = _gathered(part)
            _add(out, [r.value for r in g.result.results if r.found], g)
        return out

    async def scan(self, view: str, bounds: Bounds, fresh: Freshness, limit: int) -> Rows:
        """Up to ``limit`` rows, a page of at most ``MAX_LIMIT`` (a peer's) at a time;
        none for a range ending where it starts or before (``BETWEEN 'b' AND 'a'``: the
        query layer refuses such a scan)."""
        if bounds.start is not None and bounds.end is not None and (
                bounds.end.encode() <= bounds.start.encode()):
            return Rows([])
        f, caller = _fresh(fresh), _caller(fresh)
        windowed = self.queries.view(view).windowed
        out, cursor = Rows([]), None
        while len(out.rows) < limit:
            page = min(MAX_LIMIT, limit - len(out.rows))
            query: q.Scan | q.WindowScan = (  # a windowed view: the windows of the prefix
                q.WindowScan(view, prefix=bounds.prefix, limit=page, cursor=cursor, fresh=f)
                if windowed else q.Scan(view, bounds.start, bounds.end, bounds.prefix, page,
                                        cursor, fresh=f))
            got = _gathered(await self.queries.scan(query, caller))
            _add(out, [r["value"] for r in got.result.rows if _inside(r["key"], bounds)], got)
            cursor = got.result.next_cursor
            if cursor is None:
                break
        return out

    async def aggregate(self, view: str, group_by: Sequence[str], aggs: Sequence[str],
                        prefix: str | None, fresh: Freshness) -> Groups:
        got = _gathered(await self.queries.aggregate(
            q.Aggregate(view, tuple(group_by), tuple(aggs), prefix, fresh=_fresh(fresh)),
            _caller(fresh)))
        return Groups(got.result.groups, tuple(got.missing))

    async def run(self, query: q.Query, fresh: Freshness) -> Rows:
        """A query type's pushdown, run by the query layer as any client's query: the
        rows of its result (``result.rows``: scanned rows, each a key's ``value``)."""
        got = _gathered(await self.queries.run(
            dataclasses.replace(query, fresh=_fresh(fresh)), _caller(fresh)))
        rows = getattr(got.result, "rows", None)
        if not isinstance(rows, list):
            raise TypeError(f"a {query.kind} query's result has no rows to answer SQL with")
        out = Rows([])
        _add(out, [r["value"] for r in rows], got)
        return out


async def _few_at_once(calls: Sequence[Callable[[], Awaitable[T]]], limit: int) -> list[T]:
    """``asyncio.gather`` of the calls, at most ``limit`` of them running at once."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[T]]) -> T:
        async with gate:
            return await call()

    return list(await asyncio.gather(*(one(c) for c in calls)))


def _add(out: Rows, rows: list[Row], got: q.Gathered[Any]) -> None:
    """One page's rows, missing partitions and hops into ``out``."""
    out.rows = [*out.rows, *rows]
    out.missing = tuple(sorted({*out.missing, *got.missing}))
    out.hops = max(out.hops, got.hops)


def _fresh(fresh: Freshness) -> q.Freshness:
    return q.Freshness(fresh.max_lag, fresh.position, fresh.wait_ms, fresh.max_staleness_ms,
                       fresh.cut is not None, fresh.cut)


def _caller(fresh: Freshness) -> q.Caller:
    return q.Caller(authorization=fresh.authorization)


def _inside(key: str, b: Bounds) -> bool:
    raw = key.encode()
    return ((b.start is None or raw >= b.start.encode())
            and (b.end is None or raw < b.end.encode()))


def _gathered(got: q.Gathered[Any] | q.PeerPart[Any]) -> q.Gathered[Any]:
    if isinstance(got, q.PeerPart):  # only a peer's part (Caller.forwarded) is one
        raise TypeError("a client's query answered as a peer's part")
    return got


def _relayed(answer: Relayed | Refuse) -> PeerReply:
    """A one-partition answer from elsewhere: the replica's reply (read by the query
    layer's codec), else the error the decision names."""
    if isinstance(answer, Refuse):
        raise answer.error
    return answer.reply
