"""Client tokens and the cluster credential on a node, through the lean path and the
full app: 401 without a valid token, 403 for a view the token may not read, an HTTP
request always a client's (whatever header it carries), the owner checking the client's
token again on the peer protocol."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from nodeapp import ME, EventStream, call, make_app, peer_lookup

from streamiq.auth import hop_mark, mint
from streamiq.config import Settings

SECRET, CLUSTER = "jwt-secret-for-the-tests-32-bytes-long", "cluster-secret-for-the-tests"
TOKEN = f"Bearer {mint(SECRET, subject='t')}"
MARK = hop_mark(CLUSTER).encode()
A1 = "/v1/views/balances/keys/a1"


@pytest.fixture
def app(tmp_path: Path) -> Any:
    return make_app(tmp_path / "node", Settings(
        auth=True, jwt_secret=SECRET, cluster_secret=CLUSTER, internal_concurrency=4,
        api_keys={"orders-only-key": "views:order_counts"}))


@pytest.mark.parametrize("path", [A1, "/account/a1", "/v1/cluster", "/v1/views",
                                  "/v1/views/balances/scan", "/v1/metadata/balances/a1",
                                  "/v1/dashboard", "/v1/events", "/v1/pipeline"])
async def test_no_token_no_answer(app: Any, path: str) -> None:
    for auth in (None, "Bearer not-a-token", "Basic dXNlcjpwYXNz", TOKEN[:-2]):
        status, body, headers = await call(app, path, auth=auth)
        assert status == 401 and body["code"] == "UNAUTHENTICATED", (path, auth, body)
        assert headers["www-authenticate"] == "Bearer"


async def test_a_valid_token_is_answered_on_the_lean_path(app: Any) -> None:
    for path in (A1, "/account/a1"):
        status, body, headers = await call(app, path, auth=TOKEN)
        assert status == 200 and body["value"]["balance"] == 5
        assert headers["x-streamiq-hops"] == "0"


async def test_a_token_reads_only_its_views(app: Any) -> None:
    key = "Bearer orders-only-key"
    status, body, _ = await call(app, A1, auth=key)
    assert status == 403 and body["code"] == "FORBIDDEN" and body["view"] == "balances"
    status, body, _ = await call(app, "/v1/views/order_counts/keys/s1%7CGENERAL", auth=key)
    assert status not in (401, 403), body  # its own view: answered (here: not held)
    scoped = f"Bearer {mint(SECRET, scope='views:order_counts')}"
    assert (await call(app, "/account/a1", auth=scoped))[0] == 403


async def test_an_expired_or_foreign_token_is_refused(app: Any) -> None:
    expired = f"Bearer {mint(SECRET, ttl_s=-10)}"
    status, body, _ = await call(app, A1, auth=expired)
    assert status == 401 and "expired" in body["detail"]
    foreign = f"Bearer {mint('another-secret-of-32-bytes-at-least')}"
    assert (await call(app, A1, auth=foreign))[0] == 401


async def test_an_http_request_is_a_clients_whatever_it_claims(app: Any) -> None:
    """Peers ask over the peer protocol only: an HTTP request marked as a peer's (the
    header nodes once sent, even with the cluster credential) is a client's request,
    answered whole, taking no peer slot; the partitions a peer's part named are no
    parameter of any route (a 400 naming it, once the token is checked)."""
    slots = app.deps.coordinator.peer_slots
    free = slots._value
    for mark in (b"1", MARK):
        fwd = [(b"x-streamiq-forwarded", mark)]
        for path, query in ((A1, b""), ("/v1/views/balances/scan", b"partitions=0")):
            status, body, _ = await call(app, path, query=query, headers=fwd)
            assert status == 401 and body["code"] == "UNAUTHENTICATED", body  # no token
        status, body, _ = await call(app, A1, auth=TOKEN, headers=fwd)
        assert status == 200 and body["value"]["balance"] == 5
        status, body, _ = await call(app, "/v1/views/balances/scan", auth=TOKEN,
                                     headers=fwd)
        assert status == 200 and body["status"] == "OK" and "partial" not in body, body
        assert body["partitions"] == 3, body  # every partition
        status, body, _ = await call(app, "/v1/views/balances/scan", auth=TOKEN,
                                     query=b"partitions=0", headers=fwd)
        assert status == 400 and body["problems"][0].startswith(
            "partitions: not a parameter of this route"), body
        assert slots._value == free  # no peer slot was taken


def test_the_owner_checks_the_token_of_a_peers_lookup(app: Any) -> None:
    assert peer_lookup(app, "a1")[0] == 401
    assert peer_lookup(app, "a1", token="Bearer orders-only-key")[0] == 403
    assert peer_lookup(app, "a1", token=TOKEN)[0] == 200


# -- metadata: a token sees the views it may read; cluster:read (or views:*) sees all --

B, C = "127.0.0.1:2", "127.0.0.1:3"
_HELD = {"0": {"offset": 4, "lag": 0, "restored": 1}}
META: dict[str, Any] = {"nodes": [
    {"endpoint": ME, "self": True, "started_at": 1.0, "partitions": {"balances": _HELD}},
    {"endpoint": B, "self": False, "started_at": 1.0,
     "partitions": {"balances": _HELD, "order_counts": _HELD}},
    {"endpoint": C, "self": False, "started_at": 1.0, "partitions": {}}],  # joining
    "views": {"balances": {"0": {"assigned": [ME, B], "replicas": [
                  {"address": ME, "role": "active", "lag": 0}]}},
              "order_counts": {"0": {"assigned": [B, C], "replicas": [
                  {"address": B, "role": "active", "lag": 0}]}}}}
HEALTH: dict[str, Any] = {"faults": {"materializer": 2}, "down": [], "failed": None,
          "refused_views": {"secret_view": "too big"}}


def _progress(view: str) -> bytes:
    return json.dumps({"view": view, "batches": 3, "at": 2.0}).encode()


@pytest.fixture
def meta_app(app: Any) -> Any:
    """``app`` on a cluster of three: balances on this node and B, order_counts on B and
    C (which holds nothing yet); the pipeline reports progress for both."""
    node = app.deps.node
    node.router.metadata = lambda: META
    node.health = lambda: HEALTH
    node.ready = lambda: True
    node.freshness = lambda: {v: {"count": 1} for v in ("balances", "order_counts")}
    for view in ("balances", "order_counts"):
        app.app.state.progress.receive(_progress(view))
    app.app.state.progress.receive(b"not json")  # one skipped record
    return app


ORDERS_ONLY = ["Bearer orders-only-key", f"Bearer {mint(SECRET, scope='views:order_counts')}"]
EVERYTHING = [TOKEN, f"Bearer {mint(SECRET, scope='cluster:read')}"]  # views:*, cluster:read


async def _get(app: Any, path: str, auth: str) -> Any:
    status, body, _ = await call(app, path, auth=auth)
    assert status == 200, (path, body)
    return body


@pytest.mark.parametrize("auth", ORDERS_ONLY)
async def test_a_view_scoped_token_sees_the_metadata_of_its_views_only(meta_app: Any,
                                                                       auth: str) -> None:
    views = await _get(meta_app, "/v1/views", auth)
    assert [v["name"] for v in views["views"]] == ["order_counts"]
    cluster = await _get(meta_app, "/v1/cluster", auth)
    assert set(cluster["views"]) == {"order_counts"} and "health" not in cluster
    assert cluster["views"]["order_counts"] == META["views"]["order_counts"]
    # the nodes holding or assigned its partitions, with those partitions only
    assert [(n["endpoint"], n["partitions"]) for n in cluster["nodes"]] == [
        (B, {"order_counts": _HELD}), (C, {})]
    snap = await _get(meta_app, "/v1/dashboard", auth)
    assert snap["cluster"] == {k: cluster[k] for k in ("nodes", "views")}
    assert set(snap["pipeline"]) == {"order_counts"}
    assert set(snap["freshness"]) == {"order_counts"}
    assert not {"health", "traffic", "latency"} & set(snap)
    pipeline = await _get(meta_app, "/v1/pipeline", auth)
    assert set(pipeline["views"]) == {"order_counts"} and "skipped" not in pipeline
    text = json.dumps([views, cluster, snap, pipeline])
    assert "balances" not in text and "secret_view" not in text
    stream = EventStream(meta_app, auth.encode())  # the event stream: the same cut
    await asyncio.wait_for(stream.first.wait(), 5)
    (frame,) = stream.frames()
    await stream.leave()
    assert set(frame["cluster"]["views"]) == {"order_counts"} and "health" not in frame
    assert "balances" not in json.dumps(frame)


@pytest.mark.parametrize("auth", EVERYTHING)
async def test_the_cluster_scope_sees_everything(meta_app: Any, auth: str) -> None:
    views = await _get(meta_app, "/v1/views", auth)
    assert {v["name"] for v in views["views"]} == set(meta_app.deps.node.views)
    # what answers a position: ticks where the catalog says the view's inputs tick
    bound = {v["name"]: (v["position_bound"], v["tick_topics"]) for v in views["views"]}
    assert bound["balances"] == ("tick", ["bank-transactions"])
    assert bound["order_counts_1m"] == ("batch", [])
    cluster = await _get(meta_app, "/v1/cluster", auth)
    assert cluster == {"self": ME, **META, "health": HEALTH}
    snap = await _get(meta_app, "/v1/dashboard", auth)
    assert snap["cluster"] == META and snap["health"] == HEALTH
    assert {"traffic", "latency"} <= set(snap)
    assert set(snap["pipeline"]) == set(snap["freshness"]) == {"balances", "order_counts"}
    pipeline = await _get(meta_app, "/v1/pipeline", auth)
    assert set(pipeline["views"]) == {"balances", "order_counts"} and pipeline["skipped"] == 1


async def test_streams_of_different_scopes_get_their_own_frames(meta_app: Any) -> None:
    """Frames are shared by streams that see the same views, never across scopes."""
    streams = [EventStream(meta_app, a.encode()) for a in (*ORDERS_ONLY, *EVERYTHING)]
    await asyncio.wait_for(asyncio.gather(*(s.first.wait() for s in streams)), 5)
    frames = [s.frames()[0] for s in streams]
    for s in streams:
        await s.leave()
    assert [set(f["cluster"]["views"]) for f in frames] == [
        {"order_counts"}, {"order_counts"}, {"balances", "order_counts"},
        {"balances", "order_counts"}]
