"""Ctrl-C and SIGTERM as a flag the main loop polls.

A signal handler runs in the main thread between two bytecodes, possibly while that
thread holds a lock. ``threading.Event.set()`` takes the Event's own (non-reentrant)
lock, so calling it from a handler deadlocks when the signal lands inside the main
thread's ``Event.wait()``: seen as ``streamiq broker`` ignoring SIGTERM for good. The
flag below is a plain attribute: setting it takes no lock.
"""

from __future__ import annotations

import signal
import time
from typing import Any

__all__ = ["StopFlag", "stop_on_signals"]


class StopFlag:
    """Set once (from a signal handler or any thread); ``wait`` polls it."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds, waking within 50 ms of the flag being set."""
        deadline = time.monotonic() + timeout
        while not self._set:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, 0.05))
        return self._set


def stop_on_signals() -> StopFlag:
    """A flag set by SIGTERM or SIGINT (installed now, in the main thread)."""
    flag = StopFlag()

    def handler(_signum: int, _frame: Any) -> None:
        flag.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return flag
