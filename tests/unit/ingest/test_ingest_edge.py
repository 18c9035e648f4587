"""The ingest's HTTP edge on its real HTTP server, as run_ingest runs it: a write's token
is checked from its headers before its body is read, and the nodes' size and time limits
apply. No broker: the producer is a fake that records what would have been produced."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from fakes import FakeIngestProducer
from httpserve import exchange, serving
from prometheus_client.parser import text_string_to_metric_families

from streamiq.config import Settings
from streamiq.ingest import app as ingest
from streamiq.serving.http.http_limits import MAX_BODY_BYTES, MAX_HEAD_BYTES

KEYS = {"w": "ingest", "r": "views:*"}  # a writer's and a reader's API key
ORDER = b'{"order_id": "o-1", "store": "s-1", "type": "GENERAL", "amount": 12.5}'
BIG = 300 * 1024 * 1024


@pytest_asyncio.fixture(loop_scope="function")
async def port(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[int]:
    monkeypatch.setattr(ingest, "Producer", FakeIngestProducer)
    monkeypatch.setattr(ingest, "ensure_topics", lambda *a, **k: {})
    FakeIngestProducer.sent = []
    app = ingest.create_ingest_app(Settings(app="bank,orders", auth=True, api_keys=KEYS,
                                            request_read_timeout_s=0.3))
    async with serving(app, app.state.http_edge, lifespan=True) as p:
        yield p


def post(path: str, *headers: str, length: int | None = None, body: bytes = b"") -> bytes:
    n = len(body) if length is None else length
    return "\r\n".join([f"POST {path} HTTP/1.1", "host: i", "content-type: application/json",
                        f"content-length: {n}", *headers, "", ""]).encode() + body


async def metrics(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with httpx.AsyncClient() as c:
        text = (await c.get(f"http://127.0.0.1:{port}/metrics")).text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


@pytest.mark.parametrize(("headers", "status", "code"), [
    ((), 401, "UNAUTHENTICATED"),
    (("authorization: Bearer not-a-key",), 401, "UNAUTHENTICATED"),
    (("authorization: Bearer r",), 403, "FORBIDDEN"),
])
async def test_a_write_without_a_writers_token_is_refused_before_its_body(
        port: int, headers: tuple[str, ...], status: int, code: str) -> None:
    # 300 MB announced, none of it sent: the answer cannot have waited for the body
    got, answer_headers, body, closed = await exchange(port, post("/orders", *headers,
                                                                  length=BIG))
    assert (got, json.loads(body)["code"], closed) == (status, code, True)
    assert got != 401 or answer_headers["www-authenticate"] == "Bearer"
    assert FakeIngestProducer.sent == []


async def test_a_body_past_the_limit_is_413_with_a_token_and_nothing_is_produced(
        port: int) -> None:
    token = "authorization: Bearer w"
    status, _, body, closed = await exchange(port, post("/orders", token, length=BIG))
    assert status == 413 and json.loads(body)["limit"] == MAX_BODY_BYTES and closed
    chunk = b"a" * (1 << 20)
    chunked = post("/orders", token).replace(b"content-length: 0", b"transfer-encoding: "
                                             b"chunked") + b"".join(
        b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(MAX_BODY_BYTES // len(chunk) + 1))
    status, _, body, closed = await exchange(port, chunked)
    assert status == 413 and json.loads(body)["code"] == "BODY_TOO_LARGE" and closed
    assert FakeIngestProducer.sent == []


async def test_headers_past_the_limits_are_431(port: int) -> None:
    endless = post("/orders").removesuffix(b"\r\n") + b"x-junk: " + b"a" * (4 * MAX_HEAD_BYTES)
    status, _, body, closed = await exchange(port, endless)  # one header, never ended
    assert status == 431 and json.loads(body)["limit"] == MAX_HEAD_BYTES and closed
    many = post("/orders", *(f"x-h{i}: 1" for i in range(200)))
    status, _, body, closed = await exchange(port, many)
    assert status == 431 and json.loads(body)["code"] == "HEADER_TOO_LARGE" and closed


async def test_a_write_not_sent_whole_in_time_is_408(port: int) -> None:
    partial = post("/orders", "authorization: Bearer w", length=len(ORDER)) + ORDER[:10]
    status, _, body, closed = await exchange(port, partial)
    assert status == 408 and json.loads(body)["code"] == "REQUEST_TIMEOUT" and closed
    assert FakeIngestProducer.sent == []


async def test_writes_are_served_and_refusals_counted_by_reason(port: int) -> None:
    status, _, body, _ = await exchange(port, post("/orders", "authorization: Bearer w",
                                                   "connection: close", body=ORDER))
    assert status == 200 and json.loads(body)["record"]["amount"] == 12.5
    for _ in range(2):
        assert (await exchange(port, post("/orders", length=BIG)))[0] == 401
    async with httpx.AsyncClient() as c:  # reads are not gated: a probe needs no token
        assert (await c.get(f"http://127.0.0.1:{port}/health")).status_code == 200
    got = await metrics(port)
    assert got[("streamiq_ingest_refused_unread_total", (("reason", "unauthenticated"),))] == 2
    assert got[("streamiq_ingest_refused_total", ())] == 2
    assert len(FakeIngestProducer.sent) == 1


def test_run_ingest_serves_with_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """run_ingest serves its app with the HTTP server given this app's gate and timeout,
    stopped by SIGINT/SIGTERM."""
    from procs import free_port

    from streamiq.serving.http.server import HttpServer

    seen: list[HttpServer] = []

    async def serve(self: HttpServer, sock: Any) -> int:
        seen.append(self)
        return 0

    monkeypatch.setattr(HttpServer, "serve", serve)
    ingest.run_ingest(Settings(auth=False, request_read_timeout_s=7.5,
                               ingest_port=free_port()))
    (server,) = seen
    edge = server.state.edge
    assert edge is server.state.app.state.http_edge  # type: ignore[attr-defined]
    assert edge.request_read_timeout_s == 7.5 and edge.gate is not None
    assert server.signals and server.state.lean is None
    # its writes on the lean path (ingest/lean.py), which shares the app's counters
    assert server.state.writes is server.state.app.state.lean_writes  # type: ignore[attr-defined]
