"""The token a client sends when none is given, found once for the CLI and the Python
client: the given one, else STREAMIQ_TOKEN, else the demo token ``up`` saved beside its
state directory; each with the words an error uses to say which token was refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamiq._saved import find_token, saved_file


def test_given_then_environment_then_the_saved_demo_token(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("STREAMIQ_TOKEN", raising=False)
    monkeypatch.setenv("STREAMIQ_STATE_DIR", str(tmp_path / "state"))
    assert find_token() == (None, "")
    (tmp_path / "token").write_text("\n")  # an empty file is no token
    assert find_token() == (None, "")
    (tmp_path / "token").write_text("saved\n")
    assert find_token() == ("saved", f"the token saved in {tmp_path / 'token'}")
    monkeypatch.setenv("STREAMIQ_TOKEN", "env")
    assert find_token() == ("env", "the token in STREAMIQ_TOKEN")
    assert find_token("given") == ("given", "the token given")


def test_by_default_beside_dot_streamiq_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMIQ_STATE_DIR", raising=False)
    assert saved_file("token") == Path(".streamiq/token")
    assert saved_file("up.json") == Path(".streamiq/up.json")
