"""The dashboard every node serves at ``/``: the cluster as a picture, live.

The page and its script are static files in this package (no CDN, no build step). The
data comes from routes that need a token like every query:

- ``GET /v1/dashboard``: one snapshot (the cluster map of ``/v1/cluster``, this node's
  health, answers by how they were served, latency quantiles from the metrics, write to
  stored per view (``Node.freshness``: the page plots its last seconds), and the
  pipeline's progress as the pipeline publishes it; on a node ``streamiq up`` started,
  the state of up's parts: ready, restarts, crash-looping, from ``upstate.py``);
- ``GET /v1/events``: the same snapshot every second as server-sent events, for as long
  as the client reads (at most ``MAX_STREAMS`` at once per node). The page reads it
  with ``fetch`` so that it can send the ``Authorization`` header (``EventSource``
  cannot, and a token in the URL would end up in access logs);
- ``GET /v1/pipeline``: the pipeline's progress alone, newest per view.

Every open stream sends the same frame: it is built at most once per period, however
many dashboards are open, so the streams cost the lookup path one snapshot a second.

Each token sees the views it may read only; the node's health, traffic and latency
and up's parts need ``cluster:read`` (``views:*`` includes it;
``serving/http/visible.py``). Streams of tokens that see the same views share a frame.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles

from streamiq.auth import Principal
from streamiq.errors import Overloaded
from streamiq.serving.changelog.progress import Progress
from streamiq.serving.http.answers import Answers
from streamiq.serving.http.dashboard.upstate import UpState
from streamiq.serving.http.visible import progress_of, seen_views, snapshot_for

__all__ = ["MAX_STREAMS", "PERIOD_S", "dashboard_routes", "mount_page", "snapshot"]

STATIC = Path(__file__).parent / "static"
MAX_STREAMS = 16  # event streams open at once per node
PERIOD_S = 1.0


def snapshot(deps: Answers, progress: Progress | None = None,
             up: UpState | None = None) -> dict[str, Any]:
    """What the page shows, as of now."""
    node, co = deps.node, deps.coordinator
    snap: dict[str, Any] = {
        "at": time.time(), "self": node.endpoint, "ready": node.ready(),
        "cluster": node.router.metadata(), "health": node.health(),
        "traffic": co.traffic.totals(), "latency": co.traffic.latencies(),
        "freshness": node.freshness(),
        "pipeline": progress.snapshot() if progress is not None else {}}
    parts = up.read() if up is not None else None
    if parts is not None:
        snap["up"] = parts
    return snap


def _seen(who: Principal, deps: Answers, progress: Progress | None) -> frozenset[str] | None:
    """The views ``who`` sees among those served here and those the pipeline reports."""
    reported = progress.snapshot() if progress is not None else {}
    return seen_views(who, [*deps.node.views, *reported])


class _Frames:
    """The event streams of one node: how many are open, and the frame they send, one
    per set of views seen (rebuilt when older than most of a period)."""

    def __init__(self, deps: Answers, progress: Progress | None, up: UpState | None) -> None:
        self.deps, self.progress, self.up = deps, progress, up
        self.open: dict[object, float] = {}  # stream -> when it last sent
        self._snap: dict[str, Any] = {}
        self._built = -PERIOD_S
        self._frames: dict[frozenset[str] | None, bytes] = {}  # views seen -> frame

    def admit(self) -> object:
        now = time.monotonic()
        # a stream whose generator never ran (the client left before the body started)
        # stops counting after a few periods
        for k in [k for k, t in self.open.items() if now - t > 3 * PERIOD_S]:
            del self.open[k]
        if len(self.open) >= MAX_STREAMS:
            raise Overloaded(f"more than {MAX_STREAMS} dashboard event streams open")
        me = object()
        self.open[me] = now
        return me

    def frame(self, who: Principal) -> bytes:
        now = time.monotonic()
        if now - self._built >= PERIOD_S * 0.8:
            self._snap, self._built = snapshot(self.deps, self.progress, self.up), now
            self._frames = {}
        seen = _seen(who, self.deps, self.progress)
        frame = self._frames.get(seen)
        if frame is None:
            doc = json.dumps(snapshot_for(self._snap, seen), separators=(",", ":"))
            frame = self._frames[seen] = f"data: {doc}\n\n".encode()
        return frame


def dashboard_routes(deps: Answers, progress: Progress | None = None,
                     up: UpState | None = None) -> APIRouter:
    """The snapshot, the event stream and the pipeline's progress (mounted where a token
    is checked); ``up``: the state of the parts of the ``streamiq up`` that started this
    node."""
    r = APIRouter()
    frames = _Frames(deps, progress, up)

    @r.get("/v1/dashboard", tags=["ops"], summary="One snapshot of what the dashboard shows")
    async def one(request: Request) -> dict[str, Any]:
        return snapshot_for(snapshot(deps, progress, up),
                            _seen(deps.who(request), deps, progress))

    @r.get("/v1/pipeline", tags=["ops"],
           summary="The pipeline's progress per view, as the pipeline publishes it")
    async def pipeline(request: Request) -> dict[str, Any]:
        seen = _seen(deps.who(request), deps, progress)
        doc: dict[str, Any] = {"topic": None, "views": {}, "skipped": 0}
        if progress is not None:
            doc = {"topic": progress.topic, "views": progress_of(progress.snapshot(), seen),
                   "skipped": progress.skipped}
        if seen is not None:  # records skipped on the progress topic: cluster-wide
            del doc["skipped"]
        return doc

    # not in the OpenAPI document: a generated client (or a fuzzer) calling it would
    # read forever
    @r.get("/v1/events", include_in_schema=False)
    async def events(request: Request) -> StreamingResponse:
        me, who = frames.admit(), deps.who(request)

        async def stream() -> AsyncIterator[bytes]:
            # ends when the client leaves: Starlette cancels it on the disconnect (or
            # the send fails), and the check below catches a server that does neither
            try:
                while not await request.is_disconnected():
                    frames.open[me] = time.monotonic()
                    yield frames.frame(who)
                    await asyncio.sleep(PERIOD_S)
            finally:
                frames.open.pop(me, None)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"cache-control": "no-store",
                                          "x-accel-buffering": "no"})

    return r


def mount_page(app: FastAPI) -> None:
    """``/`` and the page's files, open (they hold no data)."""

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app.mount("/dashboard", StaticFiles(directory=STATIC), name="dashboard")
