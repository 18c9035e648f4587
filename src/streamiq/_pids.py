"""Whether a process still runs, by its PID (for what a stopped process left behind)."""

from __future__ import annotations

import os

__all__ = ["alive"]


def alive(pid: int) -> bool:
    """A process ``pid`` runs (someone else's too: it is not ours to judge). Only a
    positive PID names one process; ``os.kill`` takes others for process groups."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True
    return True
