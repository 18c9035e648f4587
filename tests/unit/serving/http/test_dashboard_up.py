"""The state of ``streamiq up``'s parts in the dashboard snapshot: read from the file up
names in ``STREAMIQ_UP_STATE``, at most once a second; no file, or not the shape up
writes, means no ``up`` section (never an error); only the cluster scope sees it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from nodeapp import EventStream, call, make_app

from streamiq.auth import mint
from streamiq.config import Settings
from streamiq.serving.http.dashboard.upstate import ENV, UpState

SECRET = "jwt-secret-for-the-tests-32-bytes-long"
PARTS = [{"name": "ingest", "where": "http://127.0.0.1:8000", "ready": False, "restarts": 5,
          "crash_looping": True, "last_exit": "code 1 at 21:40:11", "restart_in_s": 16.0,
          "restart_at": 1764100000.5},
         {"name": "node:9001", "where": "http://127.0.0.1:9001", "ready": True,
          "restarts": 0, "crash_looping": False, "last_exit": None, "restart_in_s": None,
          "restart_at": None}]
SHOWN: dict[str, Any] = {"updated": 1764099990.0, "parts": [
    {"name": "ingest", "ready": False, "restarts": 5, "crash_looping": True,
     "last_exit": "code 1 at 21:40:11", "restart_at": 1764100000.5},
    {"name": "node:9001", "ready": True, "restarts": 0, "crash_looping": False,
     "last_exit": None, "restart_at": None}]}
CLUSTER_WIDE = [mint(SECRET), mint(SECRET, scope="cluster:read")]  # views:*, cluster:read
ONE_VIEW = mint(SECRET, scope="views:balances")


def _up_json(path: Path, parts: list[dict[str, Any]] = PARTS) -> Path:
    path.write_text(json.dumps({"pid": 4242, "updated": 1764099990.0, "parts": parts}))
    return path


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where up says its state is (the file itself is up to each test)."""
    path = tmp_path / "up.json"
    monkeypatch.setenv(ENV, str(path))
    return path


def _app(tmp_path: Path) -> Any:
    app = make_app(tmp_path / "n", Settings(auth=True, jwt_secret=SECRET,
                                            cluster_secret="cluster-secret-for-the-tests"))
    node = app.deps.node
    node.ready = lambda: True
    node.health = lambda: {"faults": {}, "down": [], "failed": None}
    node.router.metadata = lambda: {"nodes": [], "views": {}}
    return app


async def _snapshot(app: Any, token: str = CLUSTER_WIDE[0]) -> dict[str, Any]:
    status, body, _ = await call(app, "/v1/dashboard",
                                 auth=f"Bearer {token}")
    assert status == 200, body
    return dict(body)


@pytest.mark.parametrize("token", CLUSTER_WIDE)
async def test_the_cluster_scope_sees_the_parts_of_up(tmp_path: Path, state: Path,
                                                      token: str) -> None:
    _up_json(state)
    app = _app(tmp_path)
    assert (await _snapshot(app, token))["up"] == SHOWN
    stream = EventStream(app, f"Bearer {token}".encode())  # the event stream: the same
    await asyncio.wait_for(stream.first.wait(), 5)
    (frame,) = stream.frames()
    await stream.leave()
    assert frame["up"] == SHOWN


async def test_a_token_for_some_views_does_not_see_them(tmp_path: Path, state: Path) -> None:
    _up_json(state)
    app = _app(tmp_path)
    snap = await _snapshot(app, ONE_VIEW)
    assert "up" not in snap and "ingest" not in json.dumps(snap)
    stream = EventStream(app, f"Bearer {ONE_VIEW}".encode())
    await asyncio.wait_for(stream.first.wait(), 5)
    (frame,) = stream.frames()
    await stream.leave()
    assert "up" not in frame


async def test_no_section_without_up_or_without_its_file(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         state: Path) -> None:
    assert "up" not in await _snapshot(_app(tmp_path / "missing"))  # up named no file yet
    _up_json(state)
    monkeypatch.delenv(ENV)
    assert "up" not in await _snapshot(_app(tmp_path / "not-started-by-up"))


@pytest.mark.parametrize("content", [
    b"", b"not json", b"\xff\xfe", b"[]", b"null", b'{"pid": 1}', b'{"parts": 3}',
    b'{"parts": [1]}', b'{"parts": [{"name": "ingest"}]}',
    b'{"parts": [{"name": 7, "ready": true, "restarts": 0, "crash_looping": false}]}',
    b'{"parts": [{"name": "x", "ready": "yes", "restarts": 0, "crash_looping": false}]}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"parts": []' + b" " * (1 << 20) + b"}"])
async def test_garbage_in_the_file_means_no_section(tmp_path: Path, state: Path,
                                                    content: bytes) -> None:
    state.write_bytes(content)
    snap = await _snapshot(_app(tmp_path))
    assert "up" not in snap and snap["health"] is not None  # the rest is there


def test_the_file_is_read_at_most_once_a_second(tmp_path: Path) -> None:
    now = [100.0]
    up = UpState(_up_json(tmp_path / "up.json"), clock=lambda: now[0])
    assert up.read() == SHOWN
    _up_json(up.path, [{**PARTS[0], "ready": True, "crash_looping": False}])
    now[0] += 0.9
    assert up.read() == SHOWN  # cached
    now[0] += 0.1
    assert up.read() == {"updated": SHOWN["updated"], "parts": [
        {**SHOWN["parts"][0], "ready": True, "crash_looping": False}]}
    up.path.unlink()
    now[0] += 1
    assert up.read() is None
