"""The node's HTTP API (FastAPI; OpenAPI at /docs).

Keys made of several columns are written with their parts joined by ``|``
(``store-7|GENERAL``); URL-encode it as ``store-7%7CGENERAL`` if your client insists.
Every answer says who served it: ``served_by``, ``role`` (active / standby / previous),
``lag`` in the body and ``X-Streamiq-Hops`` / ``X-Streamiq-Served-By`` headers.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from streamiq._http import ApiError, error_response, install_error_handlers
from streamiq.config import Settings
from streamiq.serving._json import loads_row
from streamiq.serving.consistency import Token, parse_tokens
from streamiq.serving.coordinator import SERVED_BY, Coordinator
from streamiq.serving.fastpath import LeanLookups, not_found_body
from streamiq.serving.node import Node
from streamiq.views.base import ID_PATTERN, View, store_key

__all__ = ["NodeDeps", "create_app", "create_asgi"]

log = logging.getLogger("streamiq.node")

MaxLag = Annotated[int | None, Query(ge=0, description="Max changelog lag (records) of the "
                                     "answering replica; default: the node's --max-lag.")]
Position = Annotated[str | None, Query(description="Position token(s) from ingest "
                                       "(topic:partition:offset[,...]): wait until reflected.")]
WaitMs = Annotated[int | None, Query(ge=0, le=120_000, description="Bound on the position wait.")]


class NodeDeps:
    """What route modules need: the node, its coordinator and request helpers."""

    def __init__(self, node: Node, coordinator: Coordinator) -> None:
        self.node = node
        self.coordinator = coordinator

    def view(self, name: str) -> View:
        v = self.node.views.get(name)
        if v is None:
            raise ApiError(404, "UNKNOWN_VIEW", f"no view named {name!r}",
                           views=sorted(self.node.views))
        return v

    def max_lag(self, value: int | None) -> int:
        return self.node.settings.max_lag if value is None else value

    @staticmethod
    def tokens(raw: str | None) -> list[Token]:
        if not raw:
            return []
        try:
            return parse_tokens(raw)
        except ValueError as exc:
            raise ApiError(400, "BAD_REQUEST", f"position: {exc}") from None

    def wait_s(self, wait_ms: int | None) -> float:
        return (self.node.settings.wait_timeout_ms if wait_ms is None else wait_ms) / 1000

    def stamp(self, view: str, partition: int) -> dict[str, Any]:
        """Who answers: this node, its role for the partition and its lag."""
        return {"served_by": self.node.endpoint, "role": self.coordinator.role(view, partition),
                "lag": self.node.lag(view, partition)}

    def not_active(self, view: str, partition: int) -> JSONResponse:
        return error_response(421, "NOT_ACTIVE", f"{self.node.endpoint} does not hold "
                              f"{view} partition {partition}", partition=partition)

    async def check_position(self, view: str, partition: int, tokens: list[Token],
                             wait_s: float) -> None:
        if tokens and not await self.node.wait_position(view, partition, tokens, wait_s):
            raise ApiError(503, "NOT_UP_TO_BOUND",
                           f"{self.node.endpoint} has not reflected the position within "
                           f"{wait_s:.3f}s", partition=partition, served_by=self.node.endpoint)

    async def lookup(self, request: Request, view: View, key: str, max_lag: int | None,
                     position: str | None, wait_ms: int | None) -> Response:
        if view.windowed:  # before any position wait or forwarding: the answer is known
            raise ApiError(400, "BAD_REQUEST", f"view {view.name!r} is windowed: use "
                           f"/v1/views/{view.name}/keys/{{key}}/windows")
        try:
            view.parse_key(key)
        except ValueError as exc:
            raise ApiError(400, "BAD_REQUEST", str(exc)) from None
        tokens = self.tokens(position)
        p = view.partition_of(key, self.node.partitions[view.name])

        async def local() -> Response:
            if not self.node.holds(view.name, p):
                return self.not_active(view.name, p)
            await self.check_position(view.name, p, tokens, self.wait_s(wait_ms))
            stamp = self.stamp(view.name, p)
            raw = self.node.stores[view.name].get(p, store_key(key))
            headers = {SERVED_BY: self.node.endpoint}
            if raw is None:
                return Response(not_found_body(view, key, p, stamp), 404, headers=headers,
                                media_type="application/json")
            body = {"view": view.name, "key": key, "partition": p,
                    "value": loads_row(raw), **stamp}
            return JSONResponse(body, headers=headers)

        return await self.coordinator.route(request, view.name, p, self.max_lag(max_lag), local)


def _routes(deps: NodeDeps) -> APIRouter:
    r = APIRouter()
    node = deps.node

    @r.get("/health", tags=["ops"], summary="Liveness and readiness of this node")
    async def health() -> JSONResponse:
        # hops: lookups this node forwarded, by transport (the wire or HTTP)
        return JSONResponse({**node.describe(), "hops": deps.coordinator.hop.stats(),
                             "traffic": deps.coordinator.traffic.totals()},
                            status_code=200 if node.ready() else 503)

    @r.get("/account/{account}", tags=["bank"], summary="Balance of an account (seed 000)")
    async def account(request: Request,
                      account: Annotated[str, Path(pattern=ID_PATTERN,
                                                   description="Account id")],
                      max_lag: MaxLag = None, position: Position = None,
                      wait_ms: WaitMs = None) -> Response:
        return await deps.lookup(request, deps.view("balances"), account, max_lag,
                                 position, wait_ms)

    @r.get("/v1/views", tags=["views"], summary="The views this cluster serves")
    async def views() -> dict[str, Any]:
        return {"views": [dict(v.describe(), partitions=node.partitions[v.name])
                          for v in node.views.values()]}

    @r.get("/v1/views/{view}/keys/{key}", tags=["views"], summary="Key lookup, from any node")
    async def get_key(request: Request, view: str, key: str, max_lag: MaxLag = None,
                      position: Position = None, wait_ms: WaitMs = None) -> Response:
        return await deps.lookup(request, deps.view(view), key, max_lag, position, wait_ms)

    @r.get("/v1/metadata/{view}/{key}", tags=["metadata"],
           summary="Partition, active node and standbys of a key")
    async def key_metadata(view: str, key: str, max_lag: MaxLag = None) -> dict[str, Any]:
        v = deps.view(view)
        try:
            v.parse_key(key)
        except ValueError as exc:
            raise ApiError(400, "BAD_REQUEST", str(exc)) from None
        assert node.router is not None
        p = v.partition_of(key, node.partitions[v.name])
        assigned = node.router.assigned(v.name, p)
        replicas = node.router.replicas(v.name, p, deps.max_lag(max_lag))
        return {"view": v.name, "key": key, "partition": p,
                "active": assigned[0] if assigned else None, "standbys": assigned[1:],
                "replicas": [e.__dict__ for e in replicas]}

    @r.get("/v1/cluster", tags=["metadata"],
           summary="Nodes, endpoints, partitions each holds and how far behind")
    async def cluster() -> dict[str, Any]:
        assert node.router is not None
        # health: this node's faults, restarting parts and skipped records (as /health)
        return {"self": node.endpoint, **node.router.metadata(), "health": node.health()}

    return r


def create_asgi(settings: Settings, node: Node | None = None) -> LeanLookups:
    """What a node serves: the FastAPI app behind the lean key-lookup path.

    The lean path sits outside FastAPI's own middleware stack (error, telemetry and
    body-limit wrappers) so that the hottest query pays for none of it; everything it
    does not answer goes through the full app unchanged.
    """
    app = create_app(settings, node)
    return LeanLookups(app, deps=app.state.deps)


def create_app(settings: Settings, node: Node | None = None) -> FastAPI:
    node = node or Node(settings)
    coordinator = Coordinator(node)
    deps = NodeDeps(node, coordinator)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await node.start()
        coordinator.start()
        try:
            yield
        finally:
            await coordinator.close()
            await node.stop()

    app = FastAPI(title="streamiq node", version="0.1.0", lifespan=lifespan,
                  description=__doc__)
    install_error_handlers(app)
    app.include_router(_routes(deps))
    from streamiq.serving.queries import query_routes

    app.include_router(query_routes(deps))
    app.state.deps = deps
    return app
