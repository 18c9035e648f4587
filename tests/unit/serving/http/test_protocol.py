"""The node's HTTP protocol over real sockets: lean answers, fallbacks, keep-alive, order."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
from fakes import RecordingTransport
from httpserve import read_response

from streamiq.serving.cluster.peers import PeerReply
from streamiq.serving.cluster.wire import (
    PREFACE,
    REPLY,
    REQUEST,
    reply_frame,
    request_body,
    request_frame,
)
from streamiq.serving.http.http_limits import HttpEdge
from streamiq.serving.http.protocol import HttpProtocol, ServerState
from streamiq.views.bank import BALANCES

A1 = "/v1/views/balances/keys/a1"
P1 = BALANCES.partition_of("a1", 3)


@pytest_asyncio.fixture(loop_scope="function")  # the tests' loop serves
async def server(app: Any, serve_node: Callable[..., Awaitable[int]]) -> int:
    return await serve_node(app)


def get(path: str, *extra: str) -> bytes:
    return "\r\n".join([f"GET {path} HTTP/1.1", "host: x", *extra, "", ""]).encode()


async def test_lean_answers_keep_the_connection_and_carry_the_servers_headers(server: int) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", server)
    for _ in range(3):  # one connection, several requests
        w.write(get(A1))
        status, headers, body = await read_response(r)
        assert status == 200 and json.loads(body)["value"]["balance"] == 5
        assert headers["x-streamiq-hops"] == "0" and headers["content-type"] == "application/json"
        assert "date" in headers and "server" in headers and "connection" not in headers
    w.close()


async def test_pipelined_requests_are_answered_in_order(server: int) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", server)
    # lean, full app (a missing key: 404 from the route), lean again, full app (a query)
    w.write(get(A1) + get("/v1/views/balances/keys/nobody") + get(A1, "x-streamiq-forwarded: 1")
            + get(A1 + "?wait_ms=1"))
    got = [await read_response(r) for _ in range(4)]
    assert [s for s, _, _ in got] == [200, 404, 200, 200]
    assert json.loads(got[1][2])["code"] == "NOT_FOUND"
    assert all(json.loads(b)["value"]["balance"] == 5 for s, _, b in got if s == 200)
    w.close()


async def test_connection_close_is_honoured(server: int) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", server)
    w.write(get(A1, "connection: close"))
    status, headers, _ = await read_response(r)
    assert status == 200 and headers["connection"] == "close"
    assert await r.read() == b""  # the server closed the connection
    w.close()


async def test_forwarded_lookup_relays_the_owner_reply(app: Any, server: int) -> None:
    deps = app.deps
    deps.node.router.active = "127.0.0.1:2"

    async def hop(address: str, body: bytes, deadline: float) -> PeerReply:
        return PeerReply(200, b'{"k":1}')

    deps.coordinator.peers._send = hop
    r, w = await asyncio.open_connection("127.0.0.1", server)
    w.write(get(A1) + get(A1))  # pipelined: the second waits for the first's hop
    for _ in range(2):
        status, headers, body = await read_response(r)
        assert (status, body) == (200, b'{"k":1}')
        assert headers["x-streamiq-hops"] == "1"
        assert headers["x-streamiq-served-by"] == "127.0.0.1:2"
    w.close()


async def test_failed_hop_is_answered_by_the_full_route_once(server: int,
                                                             hop_fails: list[str]) -> None:
    r, w = await asyncio.open_connection("127.0.0.1", server)
    w.write(get(A1))
    status, _, body = await read_response(r)
    assert status == 200 and json.loads(body)["value"]["balance"] == 5
    assert hop_fails == ["127.0.0.1:2"]  # not retried by the lean path inside the full app
    w.close()


async def test_forwarded_lookups_reuse_a_pooled_hop_and_survive_a_dropped_one(
        app: Any, server: int) -> None:
    """The peer protocol over a real socket: the preface and credential once, then one
    frame per lookup on the pooled connection, the client's token in each; a pooled
    connection the owner dropped is replaced."""
    seen: list[dict[str, Any]] = []
    connections = 0
    dropped = asyncio.Event()

    async def owner(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        assert await r.readuntil(b"\n") == PREFACE and await r.readuntil(b"\n") == b"1\n"
        while True:
            try:
                size, rid, _ = REQUEST.unpack(await r.readexactly(REQUEST.size))
                seen.append(json.loads(await r.readexactly(size)))
            except asyncio.IncompleteReadError:
                return
            w.write(reply_frame(rid, 200, b'{"n":%d}' % len(seen)))
            if len(seen) == 3:  # drop the pooled connection without saying so
                w.close()
                await w.wait_closed()
                dropped.set()
                return

    srv = await asyncio.start_server(owner, "127.0.0.1", 0)
    address = f"127.0.0.1:{srv.sockets[0].getsockname()[1]}"
    app.deps.node.router.route_elsewhere(address)
    # this node holds a1 too: on a loaded machine a hedge would answer here first
    app.deps.coordinator.peers.hedging.delay = lambda *_, **__: 3600.0
    r, w = await asyncio.open_connection("127.0.0.1", server)
    for n in (1, 2, 3):  # the first connects; the next ones go out on the pooled connection
        w.write(get(A1, "authorization: Bearer t"))
        status, headers, body = await read_response(r)
        assert (status, body) == (200, b'{"n":%d}' % n)
        assert headers["x-streamiq-hops"] == "1" and headers["x-streamiq-served-by"] == address
    assert connections == 1 and all(d["t"] == "Bearer t" and d["q"]["key"] == "a1"
                                    for d in seen)
    await asyncio.wait_for(dropped.wait(), 10)  # the pooled connection is gone
    w.write(get(A1, "authorization: Bearer t"))  # no pooled connection left: connect again
    status, headers, body = await read_response(r)
    assert (status, body) == (200, b'{"n":4}') and connections == 2
    w.close()
    srv.close()


class _Peer(RecordingTransport):
    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5), "sockname": ("127.0.0.1", 6)}.get(name, default)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


def _connection(app: Any) -> tuple[HttpProtocol, _Peer]:
    proto = HttpProtocol(ServerState(app, lean=app))
    peer = _Peer()
    proto.connection_made(peer)  # type: ignore[arg-type]
    return proto, peer


@pytest.mark.parametrize("path", [A1, "/account/a1"])
async def test_a_local_lookup_is_answered_in_the_parser_callback_with_one_write(
        app: Any, path: str) -> None:
    """No task, no ASGI round: the whole response is written before data_received returns."""
    proto, peer = _connection(app)
    proto.data_received(get(path) + get(path))
    assert len(peer.writes) == 2 and not proto.state.tasks
    for raw in peer.writes:
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and json.loads(body)["key"] == "a1"
        assert f"content-length: {len(body)}".encode() in head
    proto.connection_lost(None)


async def test_a_whole_asgi_response_leaves_in_one_write(app: Any) -> None:
    """The full app's answer (head, then body, two ASGI messages) is one write: a peer
    reading it wakes up once."""
    proto, peer = _connection(app)
    proto.data_received(get("/v1/views/balances/keys/nobody"))  # 404 from the full route
    await asyncio.wait_for(asyncio.gather(*proto.state.tasks), 30)
    (raw,) = peer.writes
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 404 ") and json.loads(body)["code"] == "NOT_FOUND"
    proto.connection_lost(None)


async def test_the_read_timeout_spares_wire_peers_and_closes_wire_strangers(
        app: Any, serve_node: Callable[..., Awaitable[int]]) -> None:
    port = await serve_node(app, HttpEdge(0.3))
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(PREFACE + b"1\n")  # a peer: the credential (no secret: "1"), then idle
    await asyncio.wait_for(w.drain(), 30)
    stranger_r, stranger_w = await asyncio.open_connection("127.0.0.1", port)
    stranger_w.write(PREFACE + b"12")  # a credential line that never ends
    # the stranger is closed after the read timeout, with no HTTP answer on the wire
    assert await asyncio.wait_for(stranger_r.read(), 30) == b""
    # the peer, idle longer, is served
    w.write(request_frame(7, 10_000, request_body("lookup", {"view": "balances", "key": "a1"},
                                                  [P1], 3, None)))
    size, rid, status = REPLY.unpack(await asyncio.wait_for(r.readexactly(REPLY.size), 30))
    assert (rid, status) == (7, 200)
    assert json.loads(await r.readexactly(size))["value"]
    w.close()
    stranger_w.close()
