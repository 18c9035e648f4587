"""A slow replica is retried elsewhere but not blamed; forwarded budgets cover waits."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiohttp
from starlette.requests import Request

from streamiq.config import Settings
from streamiq.routing.memory import StaticMembership
from streamiq.serving.cluster.coordinator import Coordinator, peer_error


def _coordinator() -> tuple[Coordinator, list[str]]:
    membership = StaticMembership("127.0.0.1:1")
    node: Any = SimpleNamespace(settings=Settings(wait_timeout_ms=5000), membership=membership)
    return Coordinator(node), membership.suspected


def _request(query: str) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/v1/views/v/keys/k",
                    "query_string": query.encode(), "headers": []})


def test_only_lost_connections_make_a_suspect() -> None:
    co, suspects = _coordinator()
    co.peers.unreachable(peer_error("slow:1", TimeoutError()))
    co.peers.unreachable(peer_error("slow:2", aiohttp.ServerTimeoutError()))
    assert suspects == []
    co.peers.unreachable(peer_error("dead:1", ConnectionRefusedError()))
    co.peers.unreachable(peer_error("dead:2", aiohttp.ServerDisconnectedError()))
    assert suspects == ["dead:1", "dead:2"]


def test_forward_budget_covers_the_position_wait() -> None:
    co, _ = _coordinator()
    plain = co.budget(_request(""))
    assert co.budget(_request("position=t:0:1&wait_ms=20000")) == plain + 20
    assert co.budget(_request("position=t:0:1")) == plain + 5  # the node's default wait
