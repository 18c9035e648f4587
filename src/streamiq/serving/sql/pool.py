"""A node's SQL workers: the processes that parse, plan and run DuckDB for its SQL
clients (``worker.py``), so none of that runs on the node's event loop or threads, and
HTTP lookups, aggregates and ``/health`` never wait behind SQL.

* **Concurrency and a queue.** Up to ``--sql-workers`` processes, each serving one
  request at a time: one starts with the pool, others when a request waits, and one idle
  for a minute stops (one is always kept: a worker holds about 130 MB). Long requests
  (DuckDB: a statement's final step, a catalog query) may hold all but one of them, kept
  for parsing, planning and descriptions, so a new statement is planned while others
  run. At most ``--sql-max-queued`` requests wait for a worker; more are refused
  (``Overloaded``, 53300). A wait counts towards the statement timeout.
* **Memory.** Each worker may use its share of ``--sql-memory-mb`` above what it held
  once started (DuckDB's buffers get 3/8 of it: a spilling sort of long strings grew a
  process ~80 MB past DuckDB's ``memory_limit``, 145 MB at a 64 MB limit, 131 MB at
  48 MB, so half left such a sort killed instead of spilling); past it, checked every 50 ms while it
  works, it is stopped and the statement refused (``TooManyRows``, 54000). A worker that
  ends a request holding more than half its share is replaced, so memory a large
  statement took is returned.
* **Disk.** Each worker's DuckDB spills into a folder of its own under the node's state
  (``.sql-spill``, emptied when the pool starts and when a worker is replaced) within its
  share of ``--sql-spill-mb``. DuckDB removes a statement's files as it ends; a worker
  whose folder still holds bytes after a long request is replaced, which empties it.
* **Cancel.** A cancelled request is cancelled in its worker (DuckDB is interrupted); a
  worker that does not answer within a second is stopped and replaced.

A worker that dies is replaced (again after 1 s, doubling to 30 s, while a start
fails). A DuckDB statement running past 0.1 s is lowered to nice 10 in its worker
(``worker.Yielding``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from streamiq.errors import Overloaded, StreamiqError, TooManyRows
from streamiq.serving.sql.frames import frame, load_error, read_frame

__all__ = ["IDLE_S", "SqlWorkers", "Worker", "WorkerGone"]

log = logging.getLogger("streamiq.sql")

_CHECK_S = 0.05  # how often a working worker's memory is read
_START_TIMEOUT_S = 120.0
_LONG = frozenset({"duck", "catalog"})
_LAUNCH = "from streamiq.serving.sql.worker import main; main()"
IDLE_S = 60.0  # a worker idle this long stops (one is always kept)


def _resident(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


class WorkerGone(StreamiqError):
    """The worker stopped while it ran a request (it is replaced)."""


class Worker:
    """One worker process and its socket (the node's end)."""

    def __init__(self, index: int, argv: Sequence[str], cap_bytes: int,
                 cancel_grace_s: float = 1.0) -> None:
        self.index = index
        self.argv = list(argv)
        self.cap_bytes = cap_bytes  # above what it held once started
        self.cancel_grace_s = cancel_grace_s  # to answer a cancel, else it is stopped
        self.proc: subprocess.Popen[bytes] | None = None
        self.baseline = 0
        self.idle_since = 0.0  # monotonic, while idle
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.dead = False

    async def start(self) -> None:
        mine, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _LAUNCH, "--fd", str(theirs.fileno()), *self.argv],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, env=_worker_env())
        finally:
            theirs.close()
        self._reader, self._writer = await asyncio.open_unix_connection(sock=mine)
        kind, rss = await asyncio.wait_for(read_frame(self._reader), _START_TIMEOUT_S)
        if kind != "ready":
            raise WorkerGone(f"SQL worker {self.index} did not start: {kind}")
        self.baseline = int(rss) or _resident(self.proc.pid)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def resident(self) -> int:
        return _resident(self.pid)

    def alive(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            self.dead = True
        return not self.dead

    def over(self, fraction: float = 1.0) -> bool:
        """Holding more than ``fraction`` of its share above its baseline."""
        return self.resident() - self.baseline > self.cap_bytes * fraction

    async def call(self, op: str, args: Sequence[Any]) -> Any:
        """One request; its result, or the error it raised in the worker."""
        assert self._reader is not None and self._writer is not None
        self._writer.write(frame(("run", op, tuple(args))))
        reply = asyncio.ensure_future(read_frame(self._reader))
        reply.add_done_callback(_retrieved)
        try:
            while not reply.done():
                await asyncio.wait([reply], timeout=_CHECK_S)
                if not reply.done() and self.over():
                    self.kill()
                    raise TooManyRows(
                        f"the statement needed more than {self.cap_bytes >> 20} MB, its share "
                        "of the SQL workers' memory (--sql-memory-mb / --sql-workers)",
                        limit_mb=self.cap_bytes >> 20)
        except asyncio.CancelledError:
            await self._cancel(reply)
            raise
        try:
            kind, value = reply.result()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.dead = True
            raise WorkerGone("the SQL worker stopped while it ran the statement") from None
        if kind == "err":
            raise load_error(value)
        return value

    async def _cancel(self, reply: asyncio.Future[Any]) -> None:
        assert self._writer is not None
        with contextlib.suppress(ConnectionError, RuntimeError):
            self._writer.write(frame(("cancel",)))
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait([reply], timeout=self.cancel_grace_s)
        if not reply.done():
            self.kill()
            reply.cancel()

    def kill(self) -> None:
        self.dead = True
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
        if self._writer is not None:
            self._writer.close()

    async def stop(self, timeout: float = 2.0) -> None:
        """Let the worker go (it exits when its socket closes); stopped if it lingers."""
        self.dead = True
        if self._writer is not None:
            self._writer.close()
        if self.proc is None:
            return
        for _ in range(int(timeout / 0.05)):
            if self.proc.poll() is not None:
                return
            await asyncio.sleep(0.05)
        self.kill()
        await asyncio.to_thread(self.proc.wait)


def _worker_env() -> dict[str, str]:
    """The node's environment without its settings (secrets among them): a worker runs
    clients' SQL and needs none of them."""
    return {k: v for k, v in os.environ.items() if not k.startswith("STREAMIQ_")}


def _retrieved(f: asyncio.Future[Any]) -> None:
    if not f.cancelled():
        f.exception()  # read: a worker stopped under a request is not "never retrieved"


class SqlWorkers:
    """The pool: ``run`` a request on a free worker, ``hold`` one for a statement."""

    def __init__(self, workers: int = 2, *, memory_mb: int = 512, spill_dir: Path | None = None,
                 spill_mb: int = 0, max_queued: int = 32, log_level: str = "warning",
                 log_format: str = "auto", cancel_grace_s: float = 1.0,
                 imports: Sequence[str] = ()) -> None:
        """``imports``: modules each worker imports first (the node's ``--views-module``:
        the query types and planner rules it declares plan there too)."""
        self.size = workers
        self.share_mb = max(16, memory_mb // workers)
        self.spill_dir = spill_dir
        self.spill_mb = spill_mb // workers if spill_dir is not None else 0
        self.max_queued = max_queued
        self.cancel_grace_s = cancel_grace_s
        self._logs = ["--log-level", log_level, "--log-format", log_format,
                      *(a for m in imports for a in ("--import", m))]
        self._idle: list[Worker] = []
        self._all: set[Worker] = set()
        self._long = 0  # workers running a long request
        self._waiting = 0
        self._changed = asyncio.Condition()
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots: set[int] = set()  # workers started or starting, by index
        self._closed = False
        self.replaced = 0  # workers replaced (stopped, died, over memory)

    def _argv(self, index: int) -> list[str]:
        argv = ["--memory-mb", str(max(8, self.share_mb * 3 // 8)), *self._logs]
        if self.spill_dir is not None and self.spill_mb:
            argv += ["--spill-dir", str(self.spill_dir / f"w{index}"),
                     "--spill-mb", str(self.spill_mb)]
        return argv

    async def start(self) -> None:
        """Empty the spill folder and start one worker (in the background: a request
        waits for it); more start when requests wait (``_grow``), and workers idle for
        ``IDLE_S`` stop, one always kept."""
        if self.spill_dir is not None:
            await asyncio.to_thread(shutil.rmtree, self.spill_dir, True)
            self.spill_dir.mkdir(parents=True, exist_ok=True)
        self._spawn(0)
        self._track(asyncio.get_running_loop().create_task(self._trim()))

    def _track(self, task: asyncio.Task[None]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _spawn(self, index: int, stopping: Worker | None = None) -> None:
        self._slots.add(index)
        self._track(asyncio.get_running_loop().create_task(self._start_one(index, stopping)))

    def _grow(self) -> None:
        """One more worker, when there is room for one."""
        free = [i for i in range(self.size) if i not in self._slots]
        if free and not self._closed:
            self._spawn(free[0])

    async def _trim(self) -> None:
        """Stop workers idle for ``IDLE_S``, but one."""
        while True:
            await asyncio.sleep(IDLE_S / 4)
            now = time.monotonic()
            async with self._changed:
                spare = [w for w in self._idle if now - w.idle_since > IDLE_S]
                spare = spare[:max(0, len(self._all) - 1)]
                for w in spare:
                    self._idle.remove(w)
                    self._all.discard(w)
                    self._slots.discard(w.index)
            for w in spare:
                await w.stop()

    async def _start_one(self, index: int, stopping: Worker | None) -> None:
        if stopping is not None:
            await stopping.stop()
        delay = 0.0
        while not self._closed:
            await asyncio.sleep(delay)
            if self.spill_dir is not None:
                await asyncio.to_thread(shutil.rmtree, self.spill_dir / f"w{index}", True)
            w = Worker(index, self._argv(index), self.share_mb << 20, self.cancel_grace_s)
            try:
                await w.start()
            except (OSError, asyncio.IncompleteReadError, TimeoutError, StreamiqError) as exc:
                w.kill()
                delay = min(30.0, max(1.0, delay * 2))
                log.error("SQL worker %d did not start (%s); again in %.0f s", index, exc, delay)
                continue
            if self._closed:
                await w.stop()
                return
            self._all.add(w)
            await self._release(w, long=False)
            return

    async def ready(self) -> None:
        """Until a worker has started (tests wait for it: a start can take seconds)."""
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self._all))

    @asynccontextmanager
    async def hold(self, *, long: bool = True) -> AsyncIterator[Worker]:
        """A worker for the caller alone (a statement gathering rows for DuckDB holds
        one: at most so many gathers at once); released, or replaced, after."""
        w = await self._acquire(long)
        try:
            yield w
        finally:
            await self._release(w, long)

    async def run(self, op: str, *args: Any) -> Any:
        """``op`` on a free worker (``duck`` and ``catalog`` are long requests)."""
        async with self.hold(long=op in _LONG) as w:
            return await w.call(op, args)

    async def _acquire(self, long: bool) -> Worker:
        if self._waiting >= self.max_queued and not self._free(long):
            raise Overloaded(f"{self._waiting} SQL statements are waiting for a worker "
                             f"already (--sql-max-queued); try again", queued=self._waiting)
        self._waiting += 1
        try:
            while True:
                async with self._changed:
                    if not self._free(long):
                        self._grow()
                    await self._changed.wait_for(lambda: self._free(long))
                    w = self._idle.pop()
                    self._long += long
                if w.alive():
                    return w
                await self._release(w, long)  # it died idle (the OOM killer...): replaced
        finally:
            self._waiting -= 1

    def _free(self, long: bool) -> bool:
        return bool(self._idle) and (not long or self.size == 1 or self._long < self.size - 1)

    async def _release(self, w: Worker, long: bool) -> None:
        why = ("" if w.dead else "holds too much memory" if w.over(0.5)
               else "left spill files" if long and self._spilled(w.index) else None)
        replace = why is not None
        async with self._changed:
            self._long -= long
            if not replace:
                w.idle_since = time.monotonic()
                self._idle.append(w)
            self._changed.notify_all()
        if replace:
            self.replaced += 1
            if why:
                log.info("SQL worker %d %s (%d MB): replaced", w.index, why,
                         w.resident() >> 20)
            self._all.discard(w)
            self._spawn(w.index, stopping=w)

    def _spilled(self, index: int) -> int:
        """Bytes in a worker's spill folder (DuckDB empties it as a statement ends)."""
        if self.spill_dir is None or not self.spill_mb:
            return 0
        try:
            return sum(e.stat().st_size for e in os.scandir(self.spill_dir / f"w{index}")
                       if e.is_file())
        except OSError:
            return 0

    @property
    def waiting(self) -> int:
        """Requests waiting for a worker now."""
        return self._waiting

    @property
    def pids(self) -> list[int]:
        """The workers' process ids (their memory counts as the node's)."""
        return [w.pid for w in self._all if not w.dead]

    async def close(self) -> None:
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(w.stop() for w in self._all), return_exceptions=True)
        self._idle.clear()
        self._all.clear()
