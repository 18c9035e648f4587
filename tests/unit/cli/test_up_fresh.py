"""``up`` wipes nothing unless told: ``--fresh`` removes the embedded broker's log, the
node stores and the checkpoints, and is refused beside an external Kafka."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamiq.cli.main import build_parser
from streamiq.cli.up import _clean_slate
from streamiq.config import Settings


def _settings(tmp_path: Path) -> Settings:
    dirs = {name: tmp_path / name for name in ("broker_dir", "state_dir", "checkpoint_dir")}
    for d in dirs.values():
        (d / "inside").mkdir(parents=True)
    return Settings(broker_dir=dirs["broker_dir"], state_dir=dirs["state_dir"],
                    checkpoint_dir=dirs["checkpoint_dir"])


def test_fresh_removes_the_brokers_log_the_stores_and_the_checkpoints(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = _settings(tmp_path)
    (tmp_path / "other").mkdir()
    _clean_slate(s, embedded=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]
    assert capsys.readouterr().out.count("--fresh: removing") == 3


def test_fresh_beside_an_external_kafka_is_refused_and_removes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = _settings(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        _clean_slate(s, embedded=False)
    assert exit_.value.code == 2
    assert "--fresh removes the embedded broker's log" in capsys.readouterr().err
    assert len(list(tmp_path.iterdir())) == 3


def test_flags_of_up_and_broker() -> None:
    args = build_parser().parse_args(["up", "--fresh", "--broker-dir", "x",
                                      "--broker-heap-mb", "256"])
    assert args.fresh and args.broker_dir == "x" and args.broker_heap_mb == "256"
    assert not build_parser().parse_args(["up"]).fresh
    assert build_parser().parse_args(["broker", "--install"]).install


def test_a_new_broker_log_clears_the_state_of_an_earlier_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from streamiq.cli.up import _stale_state

    s = _settings(tmp_path)  # stores and checkpoints of a log that is gone
    _stale_state(s)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broker_dir"]
    assert capsys.readouterr().out.count("the broker's log is new: removing") == 2
