"""Shared fixtures for the serving unit tests: a node app over real RocksDB stores."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from streamiq.config import Settings
from streamiq.serving.app import create_asgi
from streamiq.state.base import Checkpoint
from streamiq.state.rocksdb import RocksDBStore
from streamiq.views.bank import BALANCES
from streamiq.views.orders import ORDER_COUNTS, ORDER_COUNTS_1M

ME = "127.0.0.1:1"


class Router:
    def assigned(self, view: str, p: int, members: Any = None) -> list[str]:
        return [ME]


@pytest.fixture
def app(tmp_path: Path) -> Any:
    stores = {"balances": RocksDBStore(tmp_path / "b"),
              "order_counts": RocksDBStore(tmp_path / "o"),
              "order_counts_1m": RocksDBStore(tmp_path / "w")}
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

    deps.coordinator.hop.get = refused
    return calls
