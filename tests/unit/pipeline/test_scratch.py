"""Spark's scratch folders: a stopped pipeline's are removed, a running one's kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamiq.pipeline.scratch import scratch_dir


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_dead_runs_swept_live_ones_kept(tmp_path: Path) -> None:
    dead, live = _dead_pid(), os.getppid()
    for pid in (dead, live):
        (tmp_path / str(pid) / "spark-x").mkdir(parents=True)
    (tmp_path / "notes").mkdir()  # not a pid: not ours to remove
    mine = scratch_dir(tmp_path)
    assert mine == tmp_path / str(os.getpid()) and mine.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([str(live), str(os.getpid()),
                                                                 "notes"])


def test_own_folder_kept_on_a_second_call(tmp_path: Path) -> None:
    first = scratch_dir(tmp_path)
    (first / "spark-y").mkdir()
    assert scratch_dir(tmp_path) == first and (first / "spark-y").is_dir()


def test_default_is_in_the_temp_dir_per_user(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert scratch_dir() == tmp_path / f"streamiq-spark-{os.getuid()}" / str(os.getpid())
