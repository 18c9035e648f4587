"""The dashboard's data: one snapshot (``/v1/dashboard``), the same every second as
server-sent events (``/v1/events``: one frame shared by every stream, at most
``MAX_STREAMS`` at once, nothing left running when a client leaves) and the pipeline's
progress alone (``/v1/pipeline``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from nodeapp import ME, EventStream, make_app

from streamiq.serving.http.dashboard import MAX_STREAMS

CLUSTER = {"nodes": [{"endpoint": ME, "self": True, "started_at": 1.0,
                      "partitions": {"balances": {"0": {"offset": 4, "lag": 0,
                                                        "restored": 1}}}}],
           "views": {"balances": {"0": {"assigned": [ME], "replicas": []}}}}
FRESH = {"balances": {"count": 3, "p50": 0.004, "p99": 0.02, "buckets": [0.005, 0.025],
                      "counts": [2, 1, 0]}}
PROGRESS = {"view": "balances", "batches": 7, "input_rate": 12.5, "process_rate": 40.0,
            "duration_ms": 250, "dead_letters": 1, "at": 2.0}


@pytest.fixture
def app(tmp_path: Path) -> Any:
    asgi = make_app(tmp_path / "n")
    node = asgi.deps.node
    node.ready = lambda: True
    node.health = lambda: {"faults": {}, "down": [], "failed": None}
    node.router.metadata = lambda: CLUSTER
    node.freshness = lambda: FRESH
    asgi.app.state.progress.receive(json.dumps(PROGRESS).encode())
    return asgi


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://n")


async def test_the_snapshot_shows_cluster_traffic_latency_and_progress(app: Any) -> None:
    async with _client(app) as c:
        assert (await c.get("/v1/views/balances/keys/a1")).status_code == 200
        snap = (await c.get("/v1/dashboard")).json()
    assert snap["self"] == ME and snap["ready"] is True and snap["cluster"] == CLUSTER
    assert snap["traffic"]["local"] == 1 and snap["traffic"]["forwarded"] == 0
    assert snap["latency"]["local"]["count"] == 1 and snap["latency"]["local"]["p99"] > 0
    assert snap["latency"]["fanout"] == {"count": 0, "p50": None, "p99": None}
    assert snap["pipeline"] == {"balances": PROGRESS}
    assert snap["freshness"] == FRESH  # write to stored, plotted by the page


async def test_pipeline_progress_alone(app: Any) -> None:
    app.app.state.progress.receive(b"garbage")
    async with _client(app) as c:
        doc = (await c.get("/v1/pipeline")).json()
    assert doc == {"topic": "_streamiq-streamiq-progress", "views": {"balances": PROGRESS},
                   "skipped": 1}


async def test_events_stream_snapshots_and_ends_when_the_client_leaves(app: Any) -> None:
    before = len(asyncio.all_tasks())
    s = EventStream(app)
    await asyncio.wait_for(s.first.wait(), 5)
    assert s.status == 200
    headers = dict(s.messages[0]["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    (frame,) = s.frames()
    assert frame["cluster"] == CLUSTER and frame["pipeline"] == {"balances": PROGRESS}
    await s.leave()
    assert len(asyncio.all_tasks()) == before  # nothing left running for it


async def test_at_most_max_streams_then_overloaded_and_slots_come_back(app: Any) -> None:
    streams = [EventStream(app) for _ in range(MAX_STREAMS)]
    await asyncio.wait_for(asyncio.gather(*(s.first.wait() for s in streams)), 5)
    assert {s.status for s in streams} == {200}
    # every stream sends the same frame: one snapshot per period however many read
    assert len({json.dumps(s.frames()[0]) for s in streams}) == 1
    extra = EventStream(app)
    await asyncio.wait_for(extra.task, 5)
    assert extra.status == 503
    assert json.loads(extra.messages[1]["body"])["code"] == "OVERLOADED"
    for s in streams:
        await s.leave()
    again = [EventStream(app) for _ in range(MAX_STREAMS)]
    await asyncio.wait_for(asyncio.gather(*(s.first.wait() for s in again)), 5)
    assert {s.status for s in again} == {200}
    for s in again:
        await s.leave()
