"""A subscription's slot (``--changes-max-subscriptions``) is given back whatever
happens, also when the client is gone before the first byte: the stream's body may never
start then (the response's head failing to go), so its own ``finally`` cannot be what
releases it (issue 40)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from nodeapp import make_app
from starlette.requests import ClientDisconnect

from streamiq.config import Settings

LIMIT = 2


async def _gone_at_once(app: Any, path: str, query: bytes, head_fails: bool
                        ) -> list[dict[str, Any]]:
    """GET ``path`` as a client that hung up before anything was answered: the server
    has seen its disconnect, and (``head_fails``) sending the head raises, as an ASGI
    server may for a client gone; returns what the app sent."""
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
             "http_version": "1.1", "method": "GET", "scheme": "http", "path": path,
             "raw_path": path.encode(), "query_string": query, "root_path": "",
             "headers": [(b"host", b"x")], "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 2)}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(m: dict[str, Any]) -> None:
        sent.append(m)
        if head_fails and m["type"] == "http.response.start" and m["status"] == 200:
            raise OSError("the client is gone")

    with contextlib.suppress(OSError, ClientDisconnect):
        await app(scope, receive, send)
    return sent


@pytest.mark.parametrize("head_fails", [False, True])
@pytest.mark.parametrize(("path", "query"), [
    ("/v1/views/balances/changes", b"key=a1"),
    ("/v1/views/balances/aggregate/changes", b"agg=count(*)")])
async def test_a_client_gone_before_the_first_byte_gives_its_slot_back(
        tmp_path: Path, path: str, query: bytes, head_fails: bool) -> None:
    app = make_app(tmp_path, Settings(auth=False, changes_max_subscriptions=LIMIT))
    for _ in range(3 * LIMIT):
        sent = await _gone_at_once(app, path, query, head_fails)
        statuses = [m["status"] for m in sent if m["type"] == "http.response.start"]
        assert 429 not in statuses, f"a slot leaked: {sent}"
