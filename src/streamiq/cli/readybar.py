"""The bar ``streamiq up`` shows on a terminal while it waits for its parts.

``3/6 parts ready, waiting for pipeline, node:9003`` with the time since start; the
parts' own output keeps scrolling above it (printed lines go through the live
display). The bar goes away once every part has been ready; on a pipe (tests, logs)
there is no bar at all and the output is exactly the lines ``up`` prints.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

__all__ = ["ReadyBar"]


class _Part(Protocol):
    name: str
    ever_ready: bool


class ReadyBar:
    """``with ReadyBar(parts, lock) as bar: supervisor.run(stopping, tick=bar.tick)``.

    ``lock`` is the lock every printer holds for a line, so the bar never starts or
    stops while a line is half written.
    """

    def __init__(self, parts: Sequence[_Part], lock: threading.Lock,
                 enabled: bool | None = None) -> None:
        self.lock = lock
        self.enabled = sys.stdout.isatty() if enabled is None else enabled
        self.total = len(parts)
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> ReadyBar:
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]streamiq up"), BarColumn(), MofNCompleteColumn(),
                TextColumn("parts ready{task.fields[waiting]}"), TimeElapsedColumn(),
                console=Console(highlight=False, soft_wrap=True), transient=True,
                redirect_stdout=True,
                redirect_stderr=False)
            self._task = self._progress.add_task("up", total=self.total, waiting="")
            with self.lock:
                self._progress.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @staticmethod
    def waiting(parts: Sequence[_Part]) -> str:
        """``, waiting for pipeline, node:9003`` (empty once all were ready)."""
        names = [p.name for p in parts if not p.ever_ready]
        return f", waiting for {', '.join(names)}" if names else ""

    def tick(self, parts: Sequence[_Part]) -> None:
        if self._progress is None or self._task is None:
            return
        ready = sum(p.ever_ready for p in parts)
        self._progress.update(self._task, completed=ready, waiting=self.waiting(parts))
        if ready == self.total:
            self.close()

    def close(self) -> None:
        if self._progress is not None:
            with self.lock:
                self._progress.stop()
            self._progress = None
