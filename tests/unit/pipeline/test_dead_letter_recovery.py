"""After a restart, the dead-letter re-scan of batches committed since the last record
runs a Spark job only when their offset range holds records (no Spark here)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from streamiq.pipeline import runner
from streamiq.pipeline.runner import Pipeline, _ViewRun


def test_no_records_compares_every_partition() -> None:
    end = {"t": {"0": 5, "1": 0}}
    assert runner._no_records({"t": {"0": 5, "1": 0}}, end)
    assert not runner._no_records({"t": {"0": 4, "1": 0}}, end)
    assert runner._no_records(None, {"t": {"0": 0, "1": 0}})  # earliest, nothing read
    assert not runner._no_records(None, {"t": {"0": 0, "1": 1}})
    assert not runner._no_records({"t": {"0": 5}}, end | {"u": {"0": 2}})  # a new topic


class _Dead:
    def __init__(self, last: int) -> None:
        self.last, self.recorded = last, -1

    def last_batch(self) -> int:
        return self.last

    def record(self, batch_id: int) -> None:
        self.recorded = batch_id


def _run(tmp_path: Path, offsets: dict[int, str], last: int) -> _ViewRun:
    """A view run whose checkpoint committed ``offsets`` (batch -> the source's line)."""
    for batch, line in offsets.items():
        (tmp_path / "commits").mkdir(exist_ok=True)
        (tmp_path / "offsets").mkdir(exist_ok=True)
        (tmp_path / "commits" / str(batch)).write_text("v1\n{}\n")
        (tmp_path / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{line}\n")
    view: Any = SimpleNamespace(name="v")
    dead: Any = _Dead(last)
    return _ViewRun(view, str(tmp_path), "c", {}, dead)


class _Scans(Pipeline):
    """A pipeline that notes the scans it would run (no Spark, no Kafka)."""

    def __init__(self) -> None:  # no super().__init__: nothing of it is used here
        self.scans: list[tuple[Any, Any]] = []

    def _scan(self, run: _ViewRun, start: dict[str, Any] | None, end: dict[str, Any]) -> int:
        self.scans.append((start, end))
        return 0


def test_a_range_without_records_is_recorded_without_a_scan(tmp_path: Path) -> None:
    run = _run(tmp_path, {3: '{"t": {"0": 5}}', 4: '{"t": {"0": 5}}'}, last=3)
    p = _Scans()
    p._recover_dead_letters(run)
    assert p.scans == [] and run.dead.recorded == 4  # type: ignore[union-attr]


def test_a_range_with_records_is_scanned(tmp_path: Path) -> None:
    run = _run(tmp_path, {3: '{"t": {"0": 5}}', 4: '{"t": {"0": 9}}'}, last=3)
    p = _Scans()
    p._recover_dead_letters(run)
    assert p.scans == [({"t": {"0": 5}}, {"t": {"0": 9}})]
    assert run.dead.recorded == 4  # type: ignore[union-attr]
