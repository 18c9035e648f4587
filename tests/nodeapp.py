"""A node app over in-memory stores, and ways to call it at the ASGI level, for the
serving unit tests (their fixtures in tests/unit/serving/conftest.py build on it)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from streamiq.config import Settings
from streamiq.routing.memory import StaticMembership
from streamiq.routing.router import Endpoint
from streamiq.serving.main import assemble
from streamiq.state import Checkpoint, StoreKind, open_store
from streamiq.views.bank import BALANCES
from streamiq.views.orders import ORDER_COUNTS, ORDER_COUNTS_1M

__all__ = ["ME", "EventStream", "FakeRouter", "call", "make_app"]

ME = "127.0.0.1:1"


class FakeRouter:
    """Routing as a test sets it: ``active`` is every partition's active owner (this
    node unless a test says otherwise), ``fresh`` the replicas the full route finds
    within any lag bound (default: the active one); ``asked`` counts owner choices."""

    def __init__(self) -> None:
        self.active = ME
        self.fresh: list[str] | None = None
        self.asked = 0
        self.global_views: frozenset[str] = frozenset()

    def assigned(self, view: str, p: int, members: Any = None) -> list[str]:
        return [self.active]

    def replicas(self, view: str, p: int, max_lag: int) -> list[Endpoint]:
        return [Endpoint(a, "active", 0) for a in (self.fresh or [self.active])]

    def states(self, view: str, partitions: list[int], max_lag: int) -> str:
        return "; ".join(f"partition {p}: {self.active} lag 0" for p in partitions)

    def owner(self, view: str, p: int, max_lag: int) -> Endpoint:
        self.asked += 1
        return Endpoint(self.active, "active", 0)

    def route_elsewhere(self, owner: str) -> None:
        """``owner`` is the active one, while the full route finds this node (it holds
        every partition): what an entry node whose view is out of date sees."""
        self.active, self.fresh = owner, [ME]


def make_app(root: Path, settings: Settings | None = None, store: StoreKind = "memory"
             ) -> Any:
    """A node app (the lean path around the FastAPI app) holding a1 in its balances;
    client authentication off unless ``settings`` say otherwise. Its stores are of kind
    ``store``, under ``root`` if they keep files."""
    settings = settings or Settings(auth=False)
    stores = {name: open_store(store, root / name)
              for name in ("balances", "order_counts", "order_counts_1m")}
    row = {"account": "a1", "balance": 5, "count": 1, "last_update": 9}
    p = BALANCES.partition_of("a1", 3)
    stores["balances"].apply(p, [(b"a1", json.dumps(row).encode())], Checkpoint(offset=1))
    node = SimpleNamespace(
        settings=settings, views={"balances": BALANCES, "order_counts": ORDER_COUNTS,
                                  "order_counts_1m": ORDER_COUNTS_1M},
        partitions={"balances": 3, "order_counts": 3, "order_counts_1m": 3}, stores=stores,
        router=FakeRouter(),
        endpoint=ME, membership=StaticMembership(ME), holds=lambda v, q: v != "order_counts",
        lag=lambda v, q: 0, freshness=lambda: {}, tick_topics={"balances": {"bank-transactions"}})
    return assemble(settings, node=node)  # type: ignore[arg-type]


async def call(app: Any, path: str, query: bytes = b"", auth: str | None = None,
               raw_path: bytes | None = None, headers: list[tuple[bytes, bytes]] | None = None
               ) -> tuple[int, Any, dict[str, str]]:
    """A client's GET of ``path`` through the lean path (which defers to the full app when
    it must), with ``headers`` besides Host and Authorization."""
    headers = [(b"host", b"x"), *(headers or [])]
    if auth:
        headers.append((b"authorization", auth.encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": path, "raw_path": raw_path or path.encode(),
             "query_string": query,
             "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 2)}
    out: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(m: dict[str, Any]) -> None:
        out.append(m)

    await app(scope, receive, send)
    hdrs = {k.decode(): v.decode() for k, v in out[0]["headers"]}
    return out[0]["status"], json.loads(b"".join(m.get("body", b"") for m in out[1:])), hdrs


class EventStream:
    """One client of ``/v1/events``, driven at the ASGI level: it reads until it is
    told to leave, then the server sees the disconnect."""

    def __init__(self, app: Any, auth: bytes | None = None) -> None:
        self.messages: list[dict[str, Any]] = []
        self.first = asyncio.Event()
        self.gone = asyncio.Event()
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "GET", "scheme": "http", "path": "/v1/events",
                 "raw_path": b"/v1/events", "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"n")] + ([(b"authorization", auth)] if auth else []),
                 "client": ("127.0.0.1", 1),
                 "server": ("127.0.0.1", 2)}
        self.task = asyncio.create_task(app(scope, self._receive, self._send))
        self._asked = False

    async def _receive(self) -> dict[str, Any]:
        if not self._asked:
            self._asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def _send(self, m: dict[str, Any]) -> None:
        self.messages.append(m)
        if (m["type"] == "http.response.body" and m.get("body")) or m.get("status", 200) != 200:
            self.first.set()

    @property
    def status(self) -> int:
        return int(self.messages[0]["status"])

    def frames(self) -> list[dict[str, Any]]:
        raw = b"".join(m.get("body", b"") for m in self.messages[1:]).decode()
        return [json.loads(f[len("data: "):]) for f in raw.split("\n\n") if f]

    async def leave(self) -> None:
        self.gone.set()
        await asyncio.wait_for(self.task, 5)


def peer_request(app: Any, kind: str, query: dict[str, Any], partitions: list[int],
                 count: int = 3, token: str | None = None) -> tuple[int, Any]:
    """What the node's peer server answers a peer's request (a lookup is answered at
    once; others need a running loop)."""
    from streamiq.serving.cluster.wire import REPLY, request_body

    out: list[bytes] = []
    app.peer_server.handle(1, 10_000, request_body(kind, query, partitions, count, token),
                           out.append)
    _, rid, status = REPLY.unpack_from(out[0])
    assert rid == 1
    return status, json.loads(out[0][REPLY.size:])


def peer_lookup(app: Any, key: str, p: int | None = None, count: int = 3,
                token: str | None = None, view: str = "balances") -> tuple[int, Any]:
    """A peer's lookup of ``key`` (its partition computed as the entry would)."""
    from streamiq.views.bank import BALANCES

    p = BALANCES.partition_of(key, count) if p is None else p
    return peer_request(app, "lookup", {"view": view, "key": key}, [p], count, token)
