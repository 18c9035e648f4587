"""Supervised background parts of a node (threads and asyncio tasks).

In the way of mode's ``ServiceThread`` and Kafka Streams' thread replacement: a part's
loop that raises is logged once with the part's name, counted, and run again after a
backoff (0.1 s doubling to 2 s); the loop recreates its own clients on every run, so a
restart is a fresh consumer resuming from the part's durable state. A part that fails
``restarts`` times in a row (a run that lasted ``healthy_after_s`` resets the count)
cannot recover: ``on_fatal(name, exc)`` is called once and the part is not run again.
While a part is down between a crash and its restart, its name is in ``down``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable

__all__ = ["Supervisor"]

log = logging.getLogger("streamiq.supervise")

Fatal = Callable[[str, BaseException], None]


class Supervisor:
    """Runs parts, restarts them with backoff, gives up after ``restarts`` in a row."""

    def __init__(self, on_fatal: Fatal | None = None, restarts: int = 5,
                 backoff_s: float = 0.1, max_backoff_s: float = 2.0,
                 healthy_after_s: float = 30.0) -> None:
        self.on_fatal = on_fatal
        self.restarts = restarts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.healthy_after_s = healthy_after_s
        self.faults: dict[str, int] = {}  # part -> exceptions caught (all time)
        self.down: set[str] = set()  # parts between a crash and their restart
        self.failed: str | None = None  # the first part that could not recover
        self.stopping = False  # shutting down: a crash is logged, never restarted
        self._streak: dict[str, int] = {}
        self._lock = threading.Lock()

    def _crashed(self, name: str, exc: BaseException, started: float) -> float | None:
        """Log and count a crash; the delay before the restart, or None: give up."""
        with self._lock:
            self.faults[name] = self.faults.get(name, 0) + 1
            streak = 1 if time.monotonic() - started >= self.healthy_after_s \
                else self._streak.get(name, 0) + 1
            self._streak[name] = streak
            give_up = self.stopping or streak > self.restarts
            if not give_up:
                self.down.add(name)
            fatal = give_up and not self.stopping and self.failed is None
            if fatal:
                self.failed = name
        if self.stopping:
            log.warning("%s failed while stopping: %r", name, exc)
            return None
        log.error("%s failed (fault %d, %d in a row): %r", name, self.faults[name], streak,
                  exc, exc_info=exc)
        if not give_up:
            doubling: int = 2 ** (streak - 1)  # streak >= 1
            return min(self.max_backoff_s, self.backoff_s * doubling)
        log.critical("%s failed %d times in a row: giving up", name, streak)
        if fatal and self.on_fatal is not None:
            self.on_fatal(name, exc)
        return None

    def _running(self, name: str) -> None:
        with self._lock:
            self.down.discard(name)

    def thread(self, name: str, run: Callable[[], None], stop: threading.Event
               ) -> threading.Thread:
        """A daemon thread running ``run`` until it returns (it should when ``stop`` is
        set); a restart waits for the backoff or ``stop``, whichever comes first."""

        def loop() -> None:
            while not stop.is_set():
                started = time.monotonic()
                self._running(name)
                try:
                    run()
                    return
                except Exception as exc:
                    delay = self._crashed(name, exc, started)
                if delay is None or stop.wait(delay):
                    return

        return threading.Thread(target=loop, name=name, daemon=True)

    def task(self, name: str, run: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """An asyncio task running ``run()`` until it returns or is cancelled."""

        async def loop() -> None:
            while True:
                started = time.monotonic()
                self._running(name)
                try:
                    await run()
                    return
                except Exception as exc:
                    delay = self._crashed(name, exc, started)
                if delay is None:
                    return
                await asyncio.sleep(delay)

        return asyncio.create_task(loop(), name=name)
