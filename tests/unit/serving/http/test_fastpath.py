"""The lean lookup path answers exactly like the regular route, or defers to it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from nodeapp import call, peer_lookup

from streamiq.errors import NotUpToBound
from streamiq.serving.cluster.peers import PeerReply
from streamiq.serving.cluster.placement import Forward, Redirect
from streamiq.state.base import Checkpoint
from streamiq.views.bank import BALANCES


@pytest.mark.parametrize("path", ["/v1/views/balances/keys/a1", "/account/a1"])
async def test_same_answer_as_the_route(app: Any, path: str) -> None:
    fast = await call(app, path)
    slow = await call(app, path, query=b"wait_ms=1")
    assert fast[0] == slow[0] == 200 and fast[1] == slow[1]
    assert peer_lookup(app, "a1") == (200, fast[1])  # a peer's lookup: the same row
    assert fast[1]["value"]["balance"] == 5 and fast[1]["role"] == "active"
    assert fast[2]["x-streamiq-hops"] == slow[2]["x-streamiq-hops"] == "0"
    assert fast[2]["x-streamiq-served-by"] == slow[2]["x-streamiq-served-by"]
    assert int(fast[2]["content-length"]) > 0


@pytest.mark.parametrize(("path", "status"), [
    ("/v1/views/balances/keys/nobody", 404), ("/v1/views/nope/keys/a1", 404),
    ("/v1/views/order_counts/keys/s1", 400), ("/v1/views/order_counts/keys/s1|GENERAL", 503),
    ("/account/nobody", 404), ("/account/a b", 400), ("/account/a1\n", 400),
])
async def test_everything_else_goes_to_the_route(app: Any, path: str, status: int) -> None:
    got = await call(app, path)
    assert got[0] == status and "status" in got[1]


def sending(app: Any, status: int = 200, body: bytes = b'{"k":1}'
            ) -> list[tuple[str, dict[str, Any]]]:
    """Every peer answers ``status`` and ``body``; what each was asked."""
    sent: list[tuple[str, dict[str, Any]]] = []

    async def send(address: str, request: bytes, deadline: float) -> PeerReply:
        sent.append((address, json.loads(request)))
        return PeerReply(status, body)

    app.deps.coordinator.peers._send = send  # a test's transport
    return sent


async def test_lean_forward_carries_the_token_and_says_one_hop(app: Any) -> None:
    other = "127.0.0.1:2"
    deps = app.deps
    deps.node.router.active = other
    deps.coordinator.placement.forget_roles()
    sent = sending(app)
    status, body, headers = await call(app, "/v1/views/balances/keys/zz",
                                       auth="Bearer t")
    assert (status, body) == (200, {"k": 1}) and headers["x-streamiq-hops"] == "1"
    assert headers["x-streamiq-served-by"] == other
    p = BALANCES.partition_of("zz", 3)
    # the plain lookup's request (codec.lookup_ask), the owner's inline read
    assert sent == [(other, {"k": "lookup", "p": [p], "n": 3, "t": "Bearer t",
                             "q": {"view": "balances", "key": "zz"}})]


async def test_lean_forward_asks_for_the_key_as_it_is(app: Any) -> None:
    app.deps.node.router.active = "127.0.0.1:2"
    sent = sending(app, 404, b'{"code":"NOT_FOUND"}')
    await call(app, "/v1/views/balances/keys/a b/ü")
    # a key with "/" is not a single path segment: the route answers, not the lean path
    assert sent == []
    status, body, headers = await call(app, "/v1/views/balances/keys/a bü")
    p = BALANCES.partition_of("a bü", 3)
    assert [(a, d["q"]["key"], d["p"]) for a, d in sent] == [("127.0.0.1:2", "a bü", [p])]
    assert (status, body) == (404, {"code": "NOT_FOUND"})
    assert headers["content-type"] == "application/problem+json"
    assert headers["x-streamiq-hops"] == "1" and headers["x-streamiq-served-by"] == "127.0.0.1:2"
    raw = "/v1/views/balances/keys/%61bc"  # as the client sent it: the key it names
    await call(app, "/v1/views/balances/keys/abc", raw_path=raw.encode())
    assert sent[-1][1]["q"]["key"] == "abc"


async def test_a_peers_lookup_answers_like_the_route(app: Any) -> None:
    for key in ("a1", "nobody"):
        route = await call(app, f"/v1/views/balances/keys/{key}", query=b"wait_ms=1")
        assert peer_lookup(app, key) == route[:2]  # 200 with the row; 404, same body
    # never "not found" for a key it does not hold: a partition counted differently...
    status, body = peer_lookup(app, "a1", count=4)
    assert status == 421 and body["code"] == "NOT_ACTIVE"
    app.deps.node.holds = lambda v, q: False  # ...or one this node does not hold
    assert peer_lookup(app, "a1")[0] == 421
    status, body = peer_lookup(app, "s1|GENERAL", view="order_counts_1m")
    assert status == 400 and body["code"] == "BAD_REQUEST"  # windowed


@pytest.mark.parametrize("decision", [Forward("127.0.0.1:2"), Redirect("127.0.0.1:2")])
def test_a_peers_lookup_is_never_placed_elsewhere(app: Any, decision: Any) -> None:
    """A peer's lookup is answered here or refused: it asks Placement.for_peer, which
    can say nothing else, never the client's placement, which would forward it."""
    app.deps.coordinator.placement.place = lambda *a, **k: decision
    status, body = peer_lookup(app, "a1")
    assert status == 200 and body["value"]["balance"] == 5
    app.deps.node.holds = lambda v, q: False
    assert peer_lookup(app, "a1")[0] == 421


async def test_a_failing_lean_path_falls_back_to_the_full_app(app: Any) -> None:
    def broken(path: str, headers: Any) -> None:
        raise RuntimeError("boom")

    app._begin = broken
    status, body, headers = await call(app, "/v1/views/balances/keys/a1")
    assert status == 200 and body["value"]["balance"] == 5 and headers["x-streamiq-hops"] == "0"


async def test_a_failing_forward_falls_back_to_the_full_app(app: Any,
                                                            hop_fails: list[str]) -> None:
    status, body, headers = await call(app, "/v1/views/balances/keys/a1")
    assert hop_fails == ["127.0.0.1:2"]  # the lean hop was tried once, then the full route
    assert status == 200 and body["value"]["balance"] == 5 and headers["x-streamiq-hops"] == "0"


async def test_windowed_view_lookup_is_refused_before_any_position_wait(app: Any) -> None:
    async def never(*_: Any) -> bool:
        raise AssertionError("waited on a position for a lookup that cannot succeed")

    app.deps.node.wait_position = never
    status, body, _ = await call(app, "/v1/views/order_counts_1m/keys/s1|GENERAL",
                                 query=b"position=orders:0:999999&wait_ms=60000")
    assert status == 400 and body["code"] == "BAD_REQUEST"
    assert "/v1/views/order_counts_1m/keys/{key}/windows" in body["detail"]


@pytest.mark.parametrize(("status", "asks"), [(200, 1), (421, 2), (503, 1)])
async def test_forwarding_choice_is_reused_until_a_hop_says_it_is_stale(
        app: Any, status: int, asks: int) -> None:
    deps = app.deps
    deps.node.router.route_elsewhere("127.0.0.1:2")
    sending(app, status, NotUpToBound("not yet").render() if status == 503 else b"{}")
    for _ in range(2):
        got, _, _ = await call(app, "/v1/views/balances/keys/a1")
        # relayed (a 503 too: the owner's answer, e.g. a position not reached), or
        # answered by the next replica after a 421 (here: this node)
        assert got == (503 if status == 503 else 200)
    assert deps.node.router.asked == asks  # a stale choice is made again, a good one reused


class CountingStore:
    """A store that counts its point reads (``get``), everything else passed through."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.gets = 0

    def get(self, p: int, key: bytes) -> bytes | None:
        self.gets += 1
        row: bytes | None = self.store.get(p, key)
        return row

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def count_reads(app: Any) -> CountingStore:
    stores = app.deps.node.stores
    stores["balances"] = counting = CountingStore(stores["balances"])
    return counting


@pytest.mark.parametrize("path", ["/v1/views/balances/keys/nobody", "/account/nobody"])
async def test_a_missing_key_is_read_once_with_the_routes_404(app: Any, path: str) -> None:
    store = count_reads(app)
    lean = await call(app, path)
    assert store.gets == 1  # the lean path answers the 404 itself (it read the store)
    full = await call(app, path, query=b"wait_ms=1")  # the full route
    assert store.gets == 2
    assert lean[0] == full[0] == 404 and lean[1] == full[1]
    assert lean[1]["code"] == "NOT_FOUND" and lean[1]["role"] == "active"
    assert lean[2] == full[2]  # the same headers (content-type problem+json, hops 0...)
    assert lean[2]["content-type"] == "application/problem+json"
    assert peer_lookup(app, "nobody") == (404, lean[1]) and store.gets == 3  # a peer's: once


async def test_a_missing_key_is_read_once_over_http(app: Any, serve_node: Any) -> None:
    store = count_reads(app)
    port = await serve_node(app)  # the node's HTTP protocol: the lean path from the parser
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
        r = await c.get("/v1/views/balances/keys/nobody")
        assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"
        assert store.gets == 1
        assert (await c.get("/account/a1")).status_code == 200 and store.gets == 2


async def test_the_stored_row_is_answered_byte_for_byte(app: Any) -> None:
    """The row goes into the answer as stored (an orjson.Fragment), not decoded and
    encoded again: spacing and number spelling survive."""
    stored = b'{"account": "a2", "balance": 1.50, "count": 1}'
    p = BALANCES.partition_of("a2", 3)
    app.deps.node.stores["balances"].apply(p, [(b"a2", stored)], Checkpoint(offset=2))
    status, body, _ = await call(app, "/v1/views/balances/keys/a2")
    assert status == 200 and body["value"] == {"account": "a2", "balance": 1.5, "count": 1}
    raw = app.deps.queries.read(BALANCES, "a2", p, app.deps.coordinator.placement.for_peer(
        "balances", p)).body
    assert b',"value":' + stored + b',"served_by":' in raw
    assert raw.startswith(b'{"view":"balances","key":"a2","partition":%d,' % p)



async def test_the_lean_timer_labels_each_answer_by_how_it_was_served(app: Any) -> None:
    """The lean path's latency by ``served``: its answers end with their hops header
    (local 0, forwarded 1), a refusal (503, no hops header) counts as local."""
    from streamiq.metrics import Latency
    from streamiq.serving.http.metrics import LABELS

    app.deps.coordinator.traffic.latency = latency = Latency(LABELS)
    observe = app.timer()
    local = await app.answer("/v1/views/balances/keys/a1", [])
    app.deps.node.router.active = "127.0.0.1:2"
    app.deps.coordinator.placement.forget_roles()
    sending(app)
    forwarded = await app.answer("/v1/views/balances/keys/a1", [])
    assert observe is not None and local is not None and forwarded is not None
    assert (local[0], forwarded[0]) == (200, 200)
    assert (local[2][-1][1], forwarded[2][-1][1]) == (b"0", b"1")
    observe(0.0, local)
    observe(0.0, forwarded)
    observe(0.0, app.refused(NotUpToBound("not yet")))
    assert latency.count(("lookup", "local")) == 2
    assert latency.count(("lookup", "forwarded")) == 1


async def test_an_answer_after_its_asgi_request_went_away_is_dropped_quietly() -> None:
    """Called as an ASGI app, a forwarded lookup's answer goes to a future; when the
    request was cancelled meanwhile, the answer is dropped (no InvalidStateError
    logged as a failed handler)."""
    import asyncio

    from streamiq.serving.http import fastpath
    from streamiq.serving.http.leanserve import Answer

    loop = asyncio.get_running_loop()
    gone: asyncio.Future[Answer | None] = loop.create_future()
    waiting: asyncio.Future[Answer | None] = loop.create_future()
    gone.cancel()
    answer: Answer = (200, b"{}", [])
    fastpath._settle(gone, answer)  # no InvalidStateError
    fastpath._settle(waiting, answer)
    assert gone.cancelled() and waiting.result() == answer
