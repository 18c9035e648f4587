"""Shared fixtures for the serving unit tests: node apps over in-memory stores
(``tests/nodeapp.py``), a failing hop, a node served by its HTTP server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from httpserve import serving
from nodeapp import make_app

from streamiq.serving.http.http_limits import HttpEdge
from streamiq.serving.http.protocol import HttpProtocol


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
    a1. Returns the addresses the peer requests went to."""
    deps = app.deps
    deps.node.router.route_elsewhere("127.0.0.1:2")
    calls: list[str] = []
    peers = deps.coordinator.peers
    real = peers._send

    def spy(address: str, *a: Any, **k: Any) -> Any:
        calls.append(address)
        return real(address, *a, **k)

    peers._send = spy
    return calls


@pytest_asyncio.fixture(loop_scope="function")  # the tests' loop serves
async def serve_node() -> AsyncIterator[Callable[..., Awaitable[int]]]:
    """``port = await serve_node(app)``: the app behind the HTTP server as run_node runs
    it (optionally with other limits, ``edge``, or a ``protocol`` subclass), on a free
    port."""
    async with AsyncExitStack() as running:

        async def start(app: Any, edge: HttpEdge | None = None,
                        protocol: type[HttpProtocol] = HttpProtocol) -> int:
            return await running.enter_async_context(serving(app, edge, protocol=protocol))

        yield start
