"""The client sends a bearer token: given, or from STREAMIQ_TOKEN, or the demo token
``streamiq up`` saved (``.streamiq/token``, as the CLI finds it)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from streamiq.client import Client
from streamiq.client._core import with_token


def test_the_token_comes_from_the_argument_or_the_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("STREAMIQ_TOKEN", raising=False)
    monkeypatch.setenv("STREAMIQ_STATE_DIR", str(tmp_path / "state"))
    assert with_token(None, None) == {}
    (tmp_path / "token").write_text("saved-t\n")  # what up saved beside its state dir
    assert with_token(None, None) == {"authorization": "Bearer saved-t"}
    assert with_token({"x": "1"}, "t") == {"x": "1", "authorization": "Bearer t"}
    monkeypatch.setenv("STREAMIQ_TOKEN", "env-t")
    assert with_token(None, None) == {"authorization": "Bearer env-t"}
    assert with_token({"Authorization": "Basic x"}, None) == {"Authorization": "Basic x"}


def test_every_request_carries_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMIQ_TOKEN", raising=False)
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(401, json={"code": "UNAUTHENTICATED", "detail": "no"})

    with Client("127.0.0.1:1", token="tok", transport=httpx.MockTransport(handler)) as c, \
            pytest.raises(Exception, match="UNAUTHENTICATED"):
        c.get("balances", "a1")
    assert seen and set(seen) == {"Bearer tok"}
