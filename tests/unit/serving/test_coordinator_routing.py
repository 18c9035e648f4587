"""Coordinator: partition-exact fan-out, Authorization travels, forwarded never forwards."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import httpx
from fastapi import Response
from starlette.requests import Request

from streamiq.routing.router import Endpoint
from streamiq.serving.coordinator import Coordinator

ME, B, C = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
OWNER = {0: ME, 1: B, 2: C}


class FakeRouter:
    def replicas(self, view: str, p: int, max_lag: int) -> list[Endpoint]:
        return [Endpoint(OWNER[p], "active", 0)]

    def assigned(self, view: str, p: int) -> list[str]:
        return [OWNER[p]]


def make(handler: Any) -> tuple[Coordinator, list[str]]:
    suspects: list[str] = []
    node = SimpleNamespace(
        settings=SimpleNamespace(internal_concurrency=4, redirect=False), endpoint=ME,
        router=FakeRouter(), membership=SimpleNamespace(suspect=suspects.append),
        holds=lambda view, p: p == 0, lag=lambda view, p: 0 if p == 0 else -1)
    co = Coordinator(node)  # type: ignore[arg-type]
    co.client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return co, suspects


def request(query: bytes, headers: dict[str, str]) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/v1/views/v/aggregate",
                    "query_string": query, "headers": [(k.encode(), v.encode())
                                                       for k, v in headers.items()]})


async def test_gather_each_partition_once_auth_travels_dead_owner_missing() -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        if req.url.host == "127.0.0.1" and req.url.port == 3:
            raise httpx.ConnectError("refused")
        return httpx.Response(200, json={"partial": {"n": 1}, "not_active": []})

    co, suspects = make(handler)
    locals_: list[list[int]] = []

    async def local(held: list[int]) -> dict[str, Any]:
        locals_.append(held)
        return {"n": 0}

    req = request(b"agg=sum(a)&agg=max(b)", {"authorization": "Bearer s3cret"})
    partials, missing, hops = await co.gather(req, "v", [0, 1, 2], 10, local)
    assert sorted(p["n"] for p in partials) == [0, 1] and missing == [2] and hops == 1
    assert locals_ == [[0]] and suspects == [C]
    to_b = [r for r in seen if r.url.port == 2]
    assert len(to_b) == 1
    r = to_b[0]
    assert r.headers["authorization"] == "Bearer s3cret"
    assert r.headers["x-streamiq-forwarded"] == "1"
    assert r.url.params.get_list("agg") == ["sum(a)", "max(b)"]
    assert r.url.params["partitions"] == "1"
    await co.close()


async def test_forwarded_requests_are_answered_locally_only() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        raise AssertionError("a forwarded request must never be forwarded again")

    co, _ = make(handler)

    async def local(held: list[int]) -> dict[str, Any]:
        return {"held": held}

    req = request(b"partitions=0,1", {"x-streamiq-forwarded": "1"})
    partials, missing, hops = await co.gather(req, "v", [0, 1], 10, local)
    assert partials == [{"held": [0]}] and missing == [1] and hops == 0

    async def one() -> Response:
        return Response(status_code=421)

    resp = await co.route(req, "v", 1, 10, one)
    assert resp.status_code == 421 and resp.headers["x-streamiq-hops"] == "0"
    await co.close()
