"""``_pids.alive``: a running process, a finished one, and PIDs naming no one process."""

from __future__ import annotations

import os
import subprocess
import sys

from streamiq._pids import alive


def test_a_running_process_is_alive_a_finished_one_is_not() -> None:
    assert alive(os.getpid())
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert not alive(proc.pid)


def test_pids_that_name_a_group_or_nothing_are_not_alive() -> None:
    assert not alive(0)  # os.kill(0, ...) would signal this process's group
    assert not alive(-os.getpgrp())
    assert not alive(2**70)  # too large for a pid_t
