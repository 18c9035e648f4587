"""The node's HTTP API (FastAPI; OpenAPI at /docs).

Keys made of several columns are written with their parts joined by ``|``
(``store-7|GENERAL``). A key is any text, percent-encoded as UTF-8 in the path
(``store-7%7CGENERAL``; ``a%2Fb`` is the key ``a/b``): a path that is not UTF-8 once
decoded, or an empty key, is a 400 (``serving/http/paths.py``). A token sees the metadata
of the views it may read only (``serving/http/visible.py``).
Every answer says who served it: ``served_by``, ``role`` (active / standby / previous),
``lag`` in the body and ``X-Streamiq-Hops`` / ``X-Streamiq-Served-By`` headers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Path, Request, Response
from fastapi.responses import JSONResponse

from streamiq._fastapi import install_error_handlers, known_params
from streamiq.config import Settings
from streamiq.kafka.clientlog import logged
from streamiq.metrics import CONTENT_TYPE
from streamiq.serving.changelog.progress import Progress
from streamiq.serving.http.answers import Answers
from streamiq.serving.http.changes import changes_routes
from streamiq.serving.http.dashboard import dashboard_routes, mount_page
from streamiq.serving.http.dashboard.upstate import UpState
from streamiq.serving.http.declared import declared_routes
from streamiq.serving.http.metrics import node_metrics
from streamiq.serving.http.params import MaxLag, MaxStaleness, Position, WaitMs
from streamiq.serving.http.paths import KEY, PathSegments, restore
from streamiq.serving.http.queries import query_routes
from streamiq.serving.http.visible import cluster_map, seen_views
from streamiq.serving.query.model import Freshness, Lookup
from streamiq.serving.query.reads import check_key
from streamiq.serving.routes import ACCOUNT, LOOKUP
from streamiq.supervise import Supervisor
from streamiq.views.catalog import progress_topic

__all__ = ["create_app"]

log = logging.getLogger("streamiq.node")

def _open_routes(deps: Answers) -> APIRouter:
    """What answers without a token: liveness and readiness (probes carry none)."""
    r = APIRouter()
    node = deps.node

    if node.settings.metrics:
        render = node_metrics(node, deps.coordinator.metrics)

        @r.get("/metrics", tags=["ops"], summary="Prometheus metrics of this node",
               response_class=Response)
        async def metrics() -> Response:
            return Response(render(), media_type=CONTENT_TYPE)

    @r.get("/health", tags=["ops"], summary="Liveness and readiness of this node")
    async def health() -> JSONResponse:
        # peers: replies from peers and the hedges sent (serving/cluster/hedge.py)
        return JSONResponse({**node.describe(), "peers": deps.coordinator.peers.stats(),
                             "traffic": deps.coordinator.traffic.totals()},
                            status_code=200 if node.ready() else 503)

    return r


def _routes(deps: Answers) -> APIRouter:
    """Everything else: a client token (and on a forwarded request the cluster
    credential) is checked before the route runs (``Gate.check``), on the path
    parameters as the client wrote them (``paths.restore``)."""

    async def authenticated(request: Request) -> None:
        restore(request)
        deps.check(request)
        known_params(request)  # after the token: a client without one learns nothing

    r = APIRouter(dependencies=[Depends(authenticated)],
                  responses={401: {"description": "no valid token (UNAUTHENTICATED)"},
                             403: {"description": "the token may not read this view"}})
    node = deps.node

    @r.get(ACCOUNT.path, tags=["bank"], summary="Balance of an account (seed 000)")
    async def account(request: Request,
                      account: Annotated[str, Path(pattern=ACCOUNT.pattern,
                                                   description="Account id")],
                      max_lag: MaxLag = None, position: Position = None,
                      wait_ms: WaitMs = None, max_staleness_ms: MaxStaleness = None
                      ) -> Response:
        assert ACCOUNT.view is not None  # an alias names its view
        fresh = Freshness(max_lag, position, wait_ms, max_staleness_ms)
        return await deps.lookup_response(request, Lookup(ACCOUNT.view, account, fresh=fresh))

    @r.get("/v1/views", tags=["views"],
           summary="The views this cluster serves (those the token may see)")
    async def views(request: Request) -> dict[str, Any]:
        seen = seen_views(deps.who(request), node.views)
        return {"views": [dict(v.describe(), partitions=node.partitions[v.name],
                               **_position_bound(sorted(node.tick_topics.get(v.name, ()))))
                          for v in node.views.values() if seen is None or v.name in seen]}

    @r.get(LOOKUP.path, tags=["views"], summary="Key lookup, from any node")
    async def get_key(request: Request, view: str, key: str, max_lag: MaxLag = None,
                      position: Position = None, wait_ms: WaitMs = None,
                      max_staleness_ms: MaxStaleness = None) -> Response:
        fresh = Freshness(max_lag, position, wait_ms, max_staleness_ms)
        return await deps.lookup_response(request, Lookup(view, key, fresh=fresh))

    @r.get("/v1/metadata/{view}/" + KEY, tags=["metadata"],
           summary="Partition, active node and standbys of a key")
    async def key_metadata(view: str, key: str, max_lag: MaxLag = None) -> dict[str, Any]:
        v = deps.queries.view(view)
        check_key(v, key)
        p = v.partition_of(key, node.partitions[v.name])
        assigned = node.router.assigned(v.name, p)
        replicas = node.router.replicas(v.name, p, deps.queries.max_lag(max_lag))
        return {"view": v.name, "key": key, "partition": p,
                "active": assigned[0] if assigned else None, "standbys": assigned[1:],
                "replicas": [e.__dict__ for e in replicas]}

    @r.get("/v1/cluster", tags=["metadata"],
           summary="Nodes, endpoints, partitions each holds and how far behind (of the "
                   "views the token may see; all of it and health with cluster:read)")
    async def cluster(request: Request) -> dict[str, Any]:
        seen = seen_views(deps.who(request), node.views)
        doc = {"self": node.endpoint, **cluster_map(node.router.metadata(), seen)}
        if seen is None:  # this node's faults, restarting parts, skipped records (/health)
            doc["health"] = node.health()
        return doc

    return r


def _progress(settings: Settings) -> Progress:
    """The follower of the pipeline's progress, started with the app (dashboard only: a
    supervisor of its own, so its failures never make the node unready)."""
    return Progress(logged(settings.kafka()), settings.topic(progress_topic(settings.cluster)),
                    Supervisor())


def create_app(settings: Settings, deps: Answers) -> FastAPI:
    """The HTTP routes over the query layer of a node that is already open
    (``Node.open``; wired in ``serving/main.py``). The lifespan runs the coordinator
    (pooled sessions, traffic summaries) and, at shutdown, closes the coordinator and
    then the node (the HTTP server runs it after a graceful stop: RocksDB closed and the
    cluster left on SIGTERM)."""
    node, coordinator = deps.node, deps.coordinator

    progress = _progress(settings)  # the pipeline's progress, followed while the app runs
    if hasattr(node, "reads"):  # counted with the node's other topics (a test's fake has none)
        node.reads["progress"] = progress.skips

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        coordinator.start()
        progress.start()
        try:
            yield
        finally:
            await asyncio.to_thread(progress.stop)
            await coordinator.close()
            await node.stop()

    app = FastAPI(title="streamiq node", version="0.1.0", lifespan=lifespan,
                  description=__doc__)
    install_error_handlers(app)
    app.add_middleware(PathSegments)  # keys taken from the raw path (serving/http/paths.py)
    app.include_router(_open_routes(deps))
    mount_page(app)  # the dashboard's page and files: open, they hold no data
    guarded = _routes(deps)
    guarded.include_router(query_routes(deps))
    guarded.include_router(declared_routes(deps))
    guarded.include_router(changes_routes(deps))
    guarded.include_router(dashboard_routes(deps, progress, UpState.from_env()))
    app.include_router(guarded)
    app.state.deps = deps
    app.state.progress = progress
    return app


def _position_bound(ticking: list[str]) -> dict[str, Any]:
    """What answers a read's position (besides a lookup of the written key's own row):
    ticks through the aggregation (milliseconds) for reads of positions in ``ticking``
    inputs, else the batch markers (docs/design.md, "Ticks")."""
    return {"tick_topics": ticking, "position_bound": "tick" if ticking else "batch"}
