"""Shared fixtures for the serving unit tests: a node app over in-memory stores."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import pytest_asyncio
from httpserve import serving

from streamiq.config import Settings
from streamiq.routing.memory import StaticMembership
from streamiq.routing.router import Endpoint
from streamiq.serving.http.app import create_asgi
from streamiq.serving.http.protocol import NodeHttpProtocol
from streamiq.state import Checkpoint, StoreKind, open_store
from streamiq.views.bank import BALANCES
from streamiq.views.orders import ORDER_COUNTS, ORDER_COUNTS_1M

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
        lag=lambda v, q: 0)
    return create_asgi(settings, node=node)  # type: ignore[arg-type]


@pytest.fixture
def app(tmp_path: Path) -> Any:
    return make_app(tmp_path / "node")


@pytest.fixture
def second_app(tmp_path: Path) -> Any:
    """Another node app, with its own stores (an entry node for ``app``, say)."""
    return make_app(tmp_path / "second")


@pytest.fixture
def hop_fails(app: Any) -> list[str]:
    """The lean path sees another node (127.0.0.1:2, where nothing listens) as a1's
    owner, so its hop is refused; the full route, asked next, finds this node holding
    a1. Returns the addresses the lean path's hops went to (HTTP or the wire)."""
    deps = app.deps
    deps.node.router.route_elsewhere("127.0.0.1:2")
    calls: list[str] = []
    for obj, name in ((deps.coordinator.peers, "http_hop"), (deps.coordinator.peers.hop, "fetch")):
        real = getattr(obj, name)

        def spy(address: str, *a: Any, real: Any = real, **k: Any) -> Any:
            calls.append(address)
            return real(address, *a, **k)

        setattr(obj, name, spy)
    return calls


@pytest_asyncio.fixture(loop_scope="function")  # the tests' loop serves
async def serve_node() -> AsyncIterator[Callable[..., Awaitable[int]]]:
    """``port = await serve_node(app)``: the app behind uvicorn as run_node runs it (or
    with ``http="httptools"``, uvicorn's stock protocol), on a free port."""
    async with AsyncExitStack() as running:

        async def start(app: Any, http: Any = NodeHttpProtocol) -> int:
            return await running.enter_async_context(serving(app, http))

        yield start


async def call(app: Any, path: str, forwarded: bool | bytes, query: bytes = b"",
               auth: str | None = None, raw_path: bytes | None = None) -> tuple[int, Any, dict]:
    """GET ``path`` through the lean path (which defers to the full app when it must);
    ``forwarded``: marked forwarded (True: the mark of a cluster without a secret, or
    the mark's bytes)."""
    mark = forwarded if isinstance(forwarded, bytes) else b"1"
    headers = [(b"host", b"x")] + ([(b"x-streamiq-forwarded", mark)] if forwarded else [])
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
