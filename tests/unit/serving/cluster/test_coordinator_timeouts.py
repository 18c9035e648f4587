"""A slow replica is retried elsewhere but not blamed; forwarded budgets cover waits."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiohttp

from streamiq.config import Settings
from streamiq.routing.memory import StaticMembership
from streamiq.serving.cluster.coordinator import Coordinator, peer_error
from streamiq.serving.query.asks import budget
from streamiq.serving.query.model import Freshness


def _coordinator() -> tuple[Coordinator, list[str]]:
    membership = StaticMembership("127.0.0.1:1")
    node: Any = SimpleNamespace(settings=Settings(wait_timeout_ms=5000), membership=membership)
    return Coordinator(node), membership.suspected


def test_only_lost_connections_make_a_suspect() -> None:
    co, suspects = _coordinator()
    co.peers.unreachable(peer_error("slow:1", TimeoutError()))
    co.peers.unreachable(peer_error("slow:2", aiohttp.ServerTimeoutError()))
    assert suspects == []
    co.peers.unreachable(peer_error("dead:1", ConnectionRefusedError()))
    co.peers.unreachable(peer_error("dead:2", aiohttp.ServerDisconnectedError()))
    assert suspects == ["dead:1", "dead:2"]


def test_forward_budget_covers_the_position_wait() -> None:
    wait_ms = Settings(wait_timeout_ms=5000).wait_timeout_ms
    plain = budget(Freshness(), wait_ms)
    assert budget(Freshness(position="t:0:1", wait_ms=20000), wait_ms) == plain + 20
    assert budget(Freshness(position="t:0:1"), wait_ms) == plain + 5  # the node's default
