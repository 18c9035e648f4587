"""Shared fixtures for the serving unit tests: a node app over real RocksDB stores."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import pytest_asyncio
import uvicorn

from streamiq.config import Settings
from streamiq.serving.app import create_asgi
from streamiq.serving.protocol import NodeHttpProtocol
from streamiq.state.base import Checkpoint
from streamiq.state.rocksdb import RocksDBStore
from streamiq.views.bank import BALANCES
from streamiq.views.orders import ORDER_COUNTS, ORDER_COUNTS_1M

ME = "127.0.0.1:1"


class Router:
    def assigned(self, view: str, p: int, members: Any = None) -> list[str]:
        return [ME]


def make_app(root: Path) -> Any:
    """A node app (the lean path around the FastAPI app) holding a1 in its balances."""
    stores = {"balances": RocksDBStore(root / "b"),
              "order_counts": RocksDBStore(root / "o"),
              "order_counts_1m": RocksDBStore(root / "w")}
    row = {"account": "a1", "balance": 5, "count": 1, "last_update": 9}
    p = BALANCES.partition_of("a1", 3)
    stores["balances"].apply(p, [(b"a1", json.dumps(row).encode())], Checkpoint(offset=1))
    node = SimpleNamespace(
        settings=Settings(), views={"balances": BALANCES, "order_counts": ORDER_COUNTS,
                                    "order_counts_1m": ORDER_COUNTS_1M},
        partitions={"balances": 3, "order_counts": 3, "order_counts_1m": 3}, stores=stores,
        router=Router(),
        endpoint=ME, membership=SimpleNamespace(), holds=lambda v, q: v != "order_counts",
        lag=lambda v, q: 0)
    return create_asgi(Settings(), node=node)  # type: ignore[arg-type]


@pytest.fixture
def app(tmp_path: Path) -> Any:
    return make_app(tmp_path / "node")


@pytest.fixture
def second_app(tmp_path: Path) -> Any:
    """Another node app, with its own stores (an entry node for ``app``, say)."""
    return make_app(tmp_path / "second")


@pytest.fixture
def hop_fails(app: Any) -> list[str]:
    """The lean path sees another node (127.0.0.1:2) as a1's owner and its hop fails;
    the full route, asked next, finds this node holding a1. Returns the hop's targets."""
    from streamiq.routing.router import Endpoint

    deps = app.deps
    deps.coordinator.active_here = lambda v, q, lag: False
    deps.node.router.owner = lambda v, p, lag: Endpoint("127.0.0.1:2", "active", 0)
    me = Endpoint(deps.node.endpoint, "active", 0)
    deps.node.router.replicas = lambda v, p, lag: [me]
    calls: list[str] = []

    async def refused(address: str, *_: Any) -> None:
        calls.append(address)
        raise ConnectionRefusedError(address)

    deps.coordinator.http_hop = refused  # HTTP hops (Authorization, no wire)
    deps.coordinator.hop.fetch = refused  # the lookup wire (serving/wire.py)
    return calls


@pytest_asyncio.fixture(loop_scope="function")  # the tests' loop serves
async def serve_node() -> AsyncIterator[Callable[..., Awaitable[int]]]:
    """``port = await serve_node(app)``: the app behind uvicorn as run_node runs it (or
    with ``http="httptools"``, uvicorn's stock protocol), on a free port."""
    running: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []

    async def start(app: Any, http: Any = NodeHttpProtocol) -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        # proxy_headers=False as in run_node: the lean path needs LeanLookups as the app
        srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off",
                                            proxy_headers=False, http=http,
                                            log_level="warning"))
        task = asyncio.create_task(srv.serve())
        running.append((srv, task))
        while not srv.started:
            assert not task.done(), "server did not start"
            await asyncio.sleep(0.01)
        return port

    yield start
    for srv, task in running:
        srv.should_exit = True
        await task
