"""Spark's scratch folders: a stopped pipeline's are removed, a running one's kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from streamiq.pipeline.scratch import scratch_dir


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_dead_runs_swept_live_ones_kept(tmp_path: Path) -> None:
    base = tmp_path / ".spark-local"
    dead, live = _dead_pid(), os.getppid()
    for pid in (dead, live):
        (base / str(pid) / "spark-x").mkdir(parents=True)
    (base / "notes").mkdir()  # not a pid: not ours to remove
    mine = scratch_dir(tmp_path)
    assert mine == base / str(os.getpid()) and mine.is_dir()
    assert sorted(p.name for p in base.iterdir()) == sorted([str(live), str(os.getpid()),
                                                             "notes"])


def test_own_folder_kept_on_a_second_call(tmp_path: Path) -> None:
    first = scratch_dir(tmp_path)
    (first / "spark-y").mkdir()
    assert scratch_dir(tmp_path) == first and (first / "spark-y").is_dir()
