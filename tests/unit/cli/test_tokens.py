"""``streamiq token`` and the demo token ``up`` keeps: scopes a node enforces, flags
checked by name, the secret and token files (0600), expiry and renewal."""

from __future__ import annotations

import stat
import time
from pathlib import Path

import jwt
import pytest

from streamiq.auth import Authenticator
from streamiq.cli.main import main
from streamiq.cli.tokens import DemoToken, parse_scope, parse_ttl
from streamiq.cli.up import _renew, _share_secrets, _token_lines
from streamiq.config import Settings
from streamiq.errors import Forbidden, Unauthenticated

SECRET = "s3cret-for-tests-" + "x" * 32


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _token(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["token", *argv])
    out = capsys.readouterr()
    assert exit_.value.code == 0, out.err
    return out.out.strip()


@pytest.fixture
def saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A running up's folder: its JWT secret saved beside the state directory."""
    monkeypatch.setenv("STREAMIQ_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("STREAMIQ_JWT_SECRET", raising=False)
    (tmp_path / "jwt-secret").write_text(SECRET + "\n")
    return tmp_path


def test_a_view_scoped_token_reads_that_view_only(saved: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    token = _token(["--scope", "views:balances", "--ttl", "15m"], capsys)
    auth = Authenticator(enabled=True, jwt_secret=SECRET)
    header = f"Bearer {token}"
    assert auth.reader(header, "balances").subject == "cli"
    with pytest.raises(Forbidden):
        auth.reader(header, "order_counts")
    with pytest.raises(Forbidden):
        auth.writer(header)
    claims = jwt.decode(token, SECRET, algorithms=["HS256"])
    assert claims["exp"] - claims["iat"] == 900


def test_several_scopes_by_comma_or_space(saved: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    token = _token(["--scope", "views:orders,ingest", "--subject", "bob"], capsys)
    who = Authenticator(enabled=True, jwt_secret=SECRET).writer(f"Bearer {token}")
    assert who.subject == "bob" and who.scopes == {"views:orders", "ingest"}
    assert parse_scope("views:*  ingest views:*") == "views:* ingest"


@pytest.mark.parametrize(("argv", "flag", "words"), [
    (["--scope", "views:a", "--ttl", "0"], "--ttl", "above 0"),
    (["--scope", "views:a", "--ttl", "soon"], "--ttl", "such as 90s"),
    (["--scope", "views:a", "--ttl", "400d"], "--ttl", "at most 366d"),
    (["--scope", "read:all", "--ttl", "1h"], "--scope", "'read:all'"),
    (["--scope", " , ", "--ttl", "1h"], "--scope", "expected scopes"),
    (["--ttl", "1h"], "--scope", "required"),
])
def test_bad_flags_are_usage_errors_naming_the_flag(
        saved: Path, argv: list[str], flag: str, words: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["token", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert flag in err and words in err, err
    assert "Traceback" not in err


def test_ttl_units() -> None:
    assert [parse_ttl(v) for v in ("90", "90s", "15m", "24h", "7d", "1.5h")] == \
        [90, 90, 900, 86400, 604800, 5400]


def test_without_a_running_up_it_says_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("STREAMIQ_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("STREAMIQ_JWT_SECRET", raising=False)
    with pytest.raises(SystemExit) as exit_:
        main(["token", "--scope", "views:*"])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("streamiq: error: no JWT secret in ") and "streamiq up" in err


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_the_demo_token_expires_and_is_renewed_before(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock(time.time())
    path = tmp_path / "token"
    demo = DemoToken(SECRET, path, ttl_s=30, clock=clock)
    first = demo.issue()
    assert path.read_text() == first + "\n" and _mode(path) == 0o600
    claims = jwt.decode(first, SECRET, algorithms=["HS256"])
    assert claims["exp"] - claims["iat"] == 30 and claims["scope"] == "views:* ingest"
    clock.now += 19
    _renew(demo, shown=True)
    assert path.read_text() == first + "\n" and capsys.readouterr().out == ""
    clock.now += 1  # two thirds of its life: renewed, the file re-saved, the lines printed
    _renew(demo, shown=True)
    second = path.read_text().strip()
    assert second == demo.token != first and _mode(path) == 0o600
    head, export = capsys.readouterr().out.splitlines()
    assert head.startswith("streamiq: demo token renewed") and export.endswith(second)
    claims = jwt.decode(second, SECRET, algorithms=["HS256"], options={"verify_iat": False})
    assert claims["exp"] == int(clock.now) + 30  # issued at the (injected) renewal time


def test_an_expired_demo_token_is_refused(tmp_path: Path) -> None:
    demo = DemoToken(SECRET, tmp_path / "token", ttl_s=30, clock=lambda: time.time() - 100)
    auth = Authenticator(enabled=True, jwt_secret=SECRET)
    with pytest.raises(Unauthenticated, match="expired"):
        auth.principal(f"Bearer {demo.issue()}")


def test_up_saves_its_secret_and_token_owner_only_and_prints_them_only_when_ready(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for var in ("STREAMIQ_CLUSTER_SECRET", "STREAMIQ_AUTH", "STREAMIQ_JWT_SECRET"):
        monkeypatch.setenv(var, "x")  # restored (unset) after the test: _share_secrets
        monkeypatch.delenv(var)  # sets them
    s = Settings(state_dir=tmp_path / "state")
    demo = _share_secrets(s)
    assert demo is not None
    assert "STREAMIQ_TOKEN" not in capsys.readouterr().out  # not a minute early
    secret = (tmp_path / "jwt-secret").read_text().strip()
    assert _mode(tmp_path / "jwt-secret") == 0o600 and _mode(tmp_path / "token") == 0o600
    assert Authenticator(enabled=True, jwt_secret=secret).reader(
        f"Bearer {(tmp_path / 'token').read_text().strip()}", "balances")
    head, export = _token_lines(demo)
    assert "valid 24 h, renewed by up" in head and "streamiq token --scope" in head
    assert export == f"  export STREAMIQ_TOKEN={demo.token}"
    renewed = _token_lines(demo, time.time())
    assert renewed[0].startswith("streamiq: demo token renewed") and renewed[1] == export


def test_a_renewal_that_cannot_be_saved_is_one_line_not_a_crash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock(time.time())
    demo = DemoToken(SECRET, tmp_path / "token", ttl_s=30, clock=clock)
    demo.issue()
    (tmp_path / "token").unlink()
    (tmp_path / "token").mkdir()  # os.replace onto a directory fails
    clock.now += 25
    _renew(demo, shown=True)
    out = capsys.readouterr().out
    assert out.startswith("streamiq: could not save the renewed demo token") and \
        out.count("\n") == 1
    _renew(demo, shown=True)  # not due again at once: no flood
    assert capsys.readouterr().out == ""
