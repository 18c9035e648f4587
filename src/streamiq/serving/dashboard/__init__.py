"""The dashboard every node serves at ``/``: the cluster as a picture, live.

The page and its script are static files in this package (no CDN, no build step). The
data comes from two routes that need a token like every query:

- ``GET /v1/dashboard``: one snapshot (the cluster map of ``/v1/cluster``, this node's
  health, answers by how they were served, latency quantiles from the metrics, and the
  pipeline's progress as the pipeline publishes it);
- ``GET /v1/events``: the same snapshot every second as server-sent events, for as long
  as the client reads (at most ``MAX_STREAMS`` at once per node). The page reads it
  with ``fetch`` so that it can send the ``Authorization`` header (``EventSource``
  cannot).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from streamiq.errors import Overloaded
from streamiq.serving.answers import Answers

__all__ = ["MAX_STREAMS", "dashboard_routes", "mount_page", "snapshot"]

STATIC = Path(__file__).parent / "static"
MAX_STREAMS = 16  # event streams open at once per node
PERIOD_S = 1.0
_SERVED = ("local", "forwarded", "fanout")


def snapshot(deps: Answers, progress: Callable[[], dict[str, Any]] | None = None
             ) -> dict[str, Any]:
    """What the page shows, as of now."""
    node, co = deps.node, deps.coordinator
    latency: dict[str, Any] = {}
    lat = co.traffic.latency
    if lat is not None:
        for served in _SERVED:
            keys = [k for k in lat.counts if k[1] == served]
            latency[served] = {"count": sum(lat.count(k) for k in keys),
                               "p50": lat.quantile(0.5, keys), "p99": lat.quantile(0.99, keys)}
    return {"at": time.time(), "self": node.endpoint, "ready": node.ready(),
            "cluster": node.router.metadata(), "health": node.health(),
            "traffic": co.traffic.totals(), "latency": latency,
            "pipeline": progress() if progress is not None else {}}


def dashboard_routes(deps: Answers,
                     progress: Callable[[], dict[str, Any]] | None = None) -> APIRouter:
    """The snapshot and the event stream (mounted where a token is checked)."""
    r = APIRouter()
    # open streams -> when each last sent: one whose generator never ran (the client
    # left before the body started) stops counting after a few periods
    streams: dict[object, float] = {}

    @r.get("/v1/dashboard", tags=["ops"], summary="One snapshot of what the dashboard shows")
    async def one() -> dict[str, Any]:
        return snapshot(deps, progress)

    @r.get("/v1/events", tags=["ops"], include_in_schema=False)
    async def events(request: Request) -> StreamingResponse:
        now = time.monotonic()
        for k in [k for k, t in streams.items() if now - t > 3 * PERIOD_S]:
            del streams[k]
        if len(streams) >= MAX_STREAMS:
            raise Overloaded(f"more than {MAX_STREAMS} dashboard event streams open")
        me = object()
        streams[me] = now

        async def stream() -> AsyncIterator[bytes]:
            try:
                while not await request.is_disconnected():
                    streams[me] = time.monotonic()
                    doc = json.dumps(snapshot(deps, progress), separators=(",", ":"))
                    yield f"data: {doc}\n\n".encode()
                    await asyncio.sleep(PERIOD_S)
            finally:
                streams.pop(me, None)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"cache-control": "no-store"})

    return r


def mount_page(app: FastAPI) -> None:
    """``/`` and the page's files, open (they hold no data)."""

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app.mount("/dashboard", StaticFiles(directory=STATIC), name="dashboard")
