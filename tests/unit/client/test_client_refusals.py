"""A refusal that waiting will not cure (401, 403, 400, a 404 of a route no streamiq
node has) is raised by the client at once, after one request, naming who refused, the
token sent (or that none was) and the fix; only what may pass (421, 429, 502-504) is
``transient``, and a metadata answer of that kind sends the client to the next node
(issue 50: an example waited its full three minutes on a 401)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from streamiq.client import AsyncClient, Client, QueryError

A, B = "10.0.0.1:1", "10.0.0.2:1"
UNAUTHENTICATED = {"code": "UNAUTHENTICATED", "detail": "no valid token"}


@pytest.fixture(autouse=True)
def no_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No STREAMIQ_TOKEN, no saved demo token; any wait fails the test."""
    monkeypatch.delenv("STREAMIQ_TOKEN", raising=False)
    monkeypatch.setenv("STREAMIQ_STATE_DIR", str(tmp_path / "none" / "state"))

    def no_wait(*_: object) -> None:
        raise AssertionError("the client waited")

    monkeypatch.setattr("time.sleep", no_wait)
    monkeypatch.setattr("asyncio.sleep", no_wait)


def answering(status: int, body: Any, log: list[str],
              meta_ok: bool = False) -> httpx.MockTransport:
    """Every node answers ``status`` with ``body`` (``meta_ok``: but serves metadata)."""

    def handler(req: httpx.Request) -> httpx.Response:
        log.append(f"{req.url.host}:{req.url.port} {req.url.path} "
                   f"{req.headers.get('authorization')}")
        if meta_ok and req.url.path == "/v1/views":
            return httpx.Response(200, json={"views": [{"name": "v", "partitions": 3}]})
        if meta_ok and req.url.path == "/v1/cluster":
            return httpx.Response(200, json={"nodes": [{"endpoint": A}], "views": {}})
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handler)


def test_401_without_a_token_is_raised_after_one_request_naming_the_fix() -> None:
    log: list[str] = []
    with Client(f"{A},{B}", transport=answering(401, UNAUTHENTICATED, log)) as c, \
            pytest.raises(QueryError) as e:
        c.windows("views_per_country_1m", "FR")
    assert len(log) == 1, log  # no retry elsewhere, nothing more after the refusal
    assert e.value.http_status == 401 and not e.value.transient and e.value.node == A
    text = str(e.value)
    assert text.startswith(f"401 UNAUTHENTICATED: no valid token (from {A}); no token was sent")
    assert "export STREAMIQ_TOKEN" in text and ".streamiq/token" in text, text


def test_401_names_the_token_that_was_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMIQ_TOKEN", "stale")
    log: list[str] = []
    with Client(A, transport=answering(401, UNAUTHENTICATED, log)) as c, \
            pytest.raises(QueryError, match="the token in STREAMIQ_TOKEN was refused"):
        c.views()
    assert log == [f"{A} /v1/views Bearer stale"]


def test_the_demo_token_saved_by_up_is_found_as_the_cli_finds_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("STREAMIQ_STATE_DIR")
    (tmp_path / ".streamiq").mkdir()
    (tmp_path / ".streamiq" / "token").write_text("demo-tok\n")
    monkeypatch.chdir(tmp_path)
    log: list[str] = []
    with Client(A, transport=answering(401, UNAUTHENTICATED, log)) as c, \
            pytest.raises(QueryError) as e:
        c.views()
    assert log == [f"{A} /v1/views Bearer demo-tok"]
    assert "the token saved in .streamiq/token was refused" in str(e.value)


def test_403_says_the_token_may_not_and_how_to_get_one() -> None:
    log: list[str] = []
    forbidden = {"code": "FORBIDDEN", "detail": "token may not read view 'v'"}
    with Client(A, token="t", transport=answering(403, forbidden, log, meta_ok=True)) as c, \
            pytest.raises(QueryError) as e:
        c.get("v", "k")
    assert [x.split()[1] for x in log] == ["/v1/views", "/v1/cluster", "/v1/views/v/keys/k"]
    assert "the token given may not do this" in str(e.value)
    assert "streamiq token --scope views:NAME" in str(e.value) and not e.value.transient


@pytest.mark.parametrize(("status", "body"), [(404, "Not Found"), (400, {"code": "BAD"})])
def test_what_is_not_a_streamiq_node_is_said_at_once(status: int, body: Any) -> None:
    log: list[str] = []
    with Client(f"{A},{B}", transport=answering(status, body, log)) as c, \
            pytest.raises(QueryError) as e:
        c.aggregate("v")
    assert len(log) == 1 and e.value.http_status == status and e.value.node == A


def test_a_node_that_cannot_answer_now_sends_the_client_to_the_next() -> None:
    log: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        log.append(f"{req.url.host}:{req.url.port}")
        if req.url.host == "10.0.0.1":
            return httpx.Response(503, json={"code": "UNAVAILABLE", "detail": "busy"})
        if req.url.path == "/v1/views":
            return httpx.Response(200, json={"views": []})
        return httpx.Response(200, json={"nodes": [], "views": {}})

    with Client(f"{A},{B}", transport=httpx.MockTransport(handler)) as c:
        c.refresh()
    assert log == [A, B, B]


@pytest.mark.parametrize(("status", "transient"), [
    (400, False), (401, False), (403, False), (404, False), (500, False),
    (421, True), (429, True), (502, True), (503, True), (504, True)])
def test_only_what_may_pass_is_transient(status: int, transient: bool) -> None:
    assert QueryError(status, {"code": "X"}).transient is transient


async def test_the_async_client_raises_at_once_too() -> None:
    log: list[str] = []
    async with AsyncClient(A, transport=answering(401, UNAUTHENTICATED, log)) as c:
        with pytest.raises(QueryError, match="no token was sent"):
            await c.windows("v", "FR")
    assert len(log) == 1
