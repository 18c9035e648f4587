"""An in-memory engine behind the SQL front end, and a PgServer on a loop of its own
thread, for tests with real clients (psycopg, psql, SQLAlchemy) in the test process.

The fake answers as the node's engines do: by key, key range or prefix, and the
aggregate, with partitions (crc32 of the key) that can be made unreachable and a
position (``topic:partition:offset``) that a read waits for until ``advance`` says it
was written.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import zlib
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from streamiq.auth import Principal
from streamiq.errors import CutMoved, Unauthenticated, Unavailable
from streamiq.serving.changelog.consistency import parse_tokens
from streamiq.serving.query.model import Query
from streamiq.serving.query.topk import TopK
from streamiq.serving.sql.engine import Bounds, Freshness, Groups, Row, Rows, ViewInfo
from streamiq.serving.sql.execute import Limits
from streamiq.serving.sql.pool import SqlWorkers
from streamiq.serving.sql.server import PgServer, ServerBounds

T = TypeVar("T")
PARTITIONS = 4
FOLDS: dict[str, Callable[[list[Any]], Any]] = {
    "sum": sum, "min": min, "max": max, "avg": lambda v: sum(v) / len(v)}
TOKENS = {"demo-token": Principal("demo", frozenset({"views:*"})),
          "balances-only": Principal("b", frozenset({"views:balances"}))}


def balances() -> list[Row]:
    rows: list[Row] = [{"account": str(i), "balance": i * 10, "count": i} for i in range(1, 31)]
    return [*rows, {"account": "store-9", "balance": 7, "count": 1}]


def order_counts() -> list[Row]:
    return [{"store": f"store-{s}", "type": t, "count": s + n, "revenue": s * 2.5 + n}
            for s in range(1, 10) for n, t in enumerate(("GENERAL", "RESTAURANT"))]


class FakeEngine:
    def __init__(self, views: Sequence[ViewInfo], rows: Mapping[str, Sequence[Row]]) -> None:
        self.infos = {v.name: v for v in views}
        self.rows = {name: list(r) for name, r in rows.items()}
        self.calls: list[tuple[str, str]] = []  # (kind, view) per call
        self.missing: set[int] = set()  # partitions no replica can answer
        self.written: dict[tuple[str, int], int] = {}  # next offset per topic partition
        self._advanced: asyncio.Condition | None = None
        self.cuts_made = 0  # cuts chosen (``cut``), each "in:0:<n>"
        self.read_at: list[str | None] = []  # each read's cut
        #: what the next reads raise: CutMoved naming this lower cut (None: a new one)
        self.moves: list[str | None] = []

    async def cut(self, views: Sequence[str], fresh: Freshness, settled: bool = True) -> str:
        self.cuts_made += 1
        return f"in:0:{self.cuts_made * 10}"

    def key(self, view: str, row: Row) -> str:
        return "|".join(str(row[c]) for c in self.infos[view].key_columns)

    @staticmethod
    def partition(key: str) -> int:
        return zlib.crc32(key.encode()) % PARTITIONS

    async def _wait(self, fresh: Freshness) -> None:
        self.read_at.append(fresh.cut)
        if fresh.cut is not None and self.moves:
            raise CutMoved("a key folded out of order", lower=self.moves.pop(0))
        if fresh.position is None:
            return
        if self._advanced is None:
            self._advanced = asyncio.Condition()
        tokens = parse_tokens(fresh.position)
        async with self._advanced:
            await self._advanced.wait_for(lambda: all(
                self.written.get((t, p), 0) > o for t, p, o in tokens))

    async def advance(self, topic: str, partition: int, next_offset: int) -> None:
        if self._advanced is None:
            self._advanced = asyncio.Condition()
        async with self._advanced:
            self.written[(topic, partition)] = next_offset
            self._advanced.notify_all()

    def _reachable(self, view: str, rows: Sequence[Row], touched: set[int]) -> Rows:
        """The rows of partitions that answer, and the touched ones that did not."""
        return Rows([r for r in rows if self.partition(self.key(view, r)) not in self.missing],
                    tuple(sorted(touched & self.missing)))

    async def views(self, principal: Principal) -> Sequence[ViewInfo]:
        return [v for v in self.infos.values() if principal.may_read(v.name)]

    async def lookup(self, view: str, key: str, fresh: Freshness) -> Rows:
        self.calls.append(("lookup", view))
        await self._wait(fresh)
        if self.partition(key) in self.missing:
            raise Unavailable(f"partition {self.partition(key)} of {view}: no replica")
        return Rows([r for r in self.rows[view] if self.key(view, r) == key])

    async def multi_get(self, view: str, keys: Sequence[str], fresh: Freshness) -> Rows:
        self.calls.append(("multi_get", view))
        await self._wait(fresh)
        return self._reachable(view, [r for r in self.rows[view] if self.key(view, r) in keys],
                               {self.partition(k) for k in keys})

    async def scan(self, view: str, bounds: Bounds, fresh: Freshness, limit: int) -> Rows:
        self.calls.append(("scan", view))
        await self._wait(fresh)
        rows = sorted(self.rows[view], key=lambda r: self.key(view, r).encode())

        def inside(k: str) -> bool:
            return ((bounds.prefix is None or k.startswith(bounds.prefix))
                    and (bounds.start is None or k.encode() >= bounds.start.encode())
                    and (bounds.end is None or k.encode() < bounds.end.encode()))
        got = self._reachable(view, [r for r in rows if inside(self.key(view, r))],
                              set(range(PARTITIONS)))
        got.rows = got.rows[:limit]
        return got

    async def aggregate(self, view: str, group_by: Sequence[str], aggs: Sequence[str],
                        prefix: str | None, fresh: Freshness) -> Groups:
        self.calls.append(("aggregate", view))
        await self._wait(fresh)
        got = self._reachable(view, [r for r in self.rows[view]
                                     if prefix is None or self.key(view, r).startswith(prefix)],
                              set(range(PARTITIONS)))
        groups: dict[tuple[Any, ...], list[Row]] = {}
        for r in got.rows:
            groups.setdefault(tuple(r[c] for c in group_by), []).append(r)
        out: list[Row] = []
        for values, rows in groups.items():
            g: dict[str, Any] = dict(zip(group_by, values, strict=True))
            for a in aggs:
                func, col = a[:-1].split("(")
                vals = [1 for _ in rows] if col == "*" else [
                    r[col] for r in rows if r[col] is not None]
                g[a] = len(vals) if func == "count" else FOLDS[func](vals)
            out.append(g)
        return Groups(out, got.missing)

    async def run(self, query: Query, fresh: Freshness) -> Rows:
        """A pushed-down query type: top-k (the only built-in one)."""
        assert isinstance(query, TopK), query
        view, column, desc = query.view, query.column, query.order == "desc"
        self.calls.append(("top_k", view))
        await self._wait(fresh)
        got = self._reachable(view, list(self.rows[view]), set(range(PARTITIONS)))
        nulls = [r for r in got.rows if r.get(column) is None]
        ranked = sorted((r for r in got.rows if r.get(column) is not None),
                        key=lambda r: r[column], reverse=desc)
        got.rows = (nulls + ranked if query.nulls == "first" else ranked + nulls)[:query.k]
        return got


async def authenticate(user: str, password: str) -> Principal:
    if password not in TOKENS:
        raise Unauthenticated("the token is not valid")
    return TOKENS[password]


class ServerThread:
    """A PgServer on an event loop of its own thread (sync clients block the caller)."""

    def __init__(self, engine: FakeEngine, *, limits: Limits | None = None,
                 tls: ssl.SSLContext | None = None, workers: SqlWorkers | None = None,
                 **bounds: Any) -> None:
        """``bounds``: the server's ``ServerBounds`` (max_connections 8 unless given)."""
        self.engine = engine
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()
        self.server = PgServer(engine, authenticate, limits=limits, tls=tls,
                               bounds=ServerBounds(**{"max_connections": 8, **bounds}),
                               workers=workers or SqlWorkers(2))
        self.port = self.call(self.server.start("127.0.0.1", 0))
        self.call(self.server.workers.ready(), 120)  # a test's times are its statements

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def dsn(self, token: str = "demo-token", **extra: str) -> str:
        params = {"host": "127.0.0.1", "port": str(self.port), "user": "analyst",
                  "dbname": "streamiq", "password": token, "sslmode": "disable", **extra}
        return " ".join(f"{k}={v}" for k, v in params.items())

    def stop(self) -> None:
        self.call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()
