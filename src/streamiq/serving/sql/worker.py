"""A SQL worker process (``main``, started by ``pool.py``): parses and plans
statements (sqlglot) and runs DuckDB (the catalog's queries and descriptions, the final
step over gathered rows) for one node, which started it (``pool.py``).

Nothing a client sends is parsed or run in the node's process: a statement's parse
(sqlglot: about 150 MB and a second for an 80,000-value IN list) and DuckDB's
allocations (a list function's can pass its ``memory_limit``) grow this process, which
the node stops past its share of ``--sql-memory-mb`` and replaces. A DuckDB statement
that runs past 0.1 s is lowered to nice 10 (``Yielding``), so long statements yield the
cores to the node's lookups and aggregates. It serves one request at a time; a
``cancel`` frame interrupts DuckDB (a parse runs to its end: the node stops a worker
that does not answer soon after a cancel). It exits when the node's end of its socket
closes, and with the node (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import importlib
import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from streamiq.errors import Canceled, StreamiqError
from streamiq.logs import configure_logging
from streamiq.serving.sql.catalog import Catalogs
from streamiq.serving.sql.duck import Duck, arrow_table
from streamiq.serving.sql.frames import dump_error, frame, read_frame
from streamiq.serving.sql.session import prepare_statement
from streamiq.serving.sql.split import split_statements

__all__ = ["NICE", "Work", "Yielding", "main", "resident_bytes", "serve"]

log = logging.getLogger("streamiq.sql.worker")

_PR_SET_PDEATHSIG = 1
NICE = 10  # a long statement's thread, below the node's priority (0)
DEMOTE_AFTER_S = 0.1  # a statement running this long is a long one
T = TypeVar("T")


def resident_bytes(pid: int | None = None) -> int:
    """A process's resident memory (Linux ``/proc/<pid>/statm``)."""
    with open(f"/proc/{pid or os.getpid()}/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Work:
    """What a worker does, one request at a time."""

    def __init__(self, memory_mb: int, spill_dir: str | None, spill_mb: int) -> None:
        self.duck = Duck(f"{memory_mb}MB", spill_dir, spill_mb)
        self.catalogs = Catalogs()

    async def run(self, op: str, args: Sequence[Any]) -> Any:
        if op == "prepare":  # (sql, views, max_in_list) -> Prepared
            return prepare_statement(*args)
        if op == "split":  # (text,) -> its statements
            return split_statements(args[0])
        if op == "describe":  # (views, sql, a catalog query's) -> Schema; over empty
            views, sql, catalog = args  # tables: quick, at the node's priority
            cat = self.catalogs.of(views)
            return cat.describe_catalog(sql) if catalog else cat.describe(sql)
        if op == "catalog":  # (views, sql, limit) -> Answer
            views, sql, limit = args
            return await self.catalogs.of(views).query(sql, limit)
        if op == "duck":  # (sql, {table: (columns, rows)}, limit) -> Answer
            sql, tables, limit = args
            return await self.duck.run(sql, {name: arrow_table(columns, rows)
                                             for name, (columns, rows) in tables.items()}, limit)
        raise StreamiqError(f"unknown SQL worker request {op!r}")

    def close(self) -> None:
        self.catalogs.close()
        self.duck.close()


async def _answer(work: Work, op: str, args: Sequence[Any],
                  writer: asyncio.StreamWriter) -> None:
    try:
        reply: tuple[str, Any] = ("ok", await work.run(op, args))
    except StreamiqError as exc:
        reply = ("err", dump_error(exc))
    except asyncio.CancelledError:
        reply = ("err", dump_error(Canceled("canceling statement due to user request")))
    except RecursionError:
        reply = ("err", dump_error(StreamiqError("the statement is nested too deeply")))
    except Exception as exc:
        log.exception("SQL worker: unexpected error in %s", op)
        reply = ("err", dump_error(StreamiqError(f"internal error: {type(exc).__name__}")))
    try:
        data = frame(reply)
    except Exception as exc:  # a result that cannot be pickled
        log.exception("SQL worker: cannot send the result of %s", op)
        data = frame(("err", dump_error(StreamiqError(f"internal error: {type(exc).__name__}"))))
    with contextlib.suppress(ConnectionError):  # the node let this worker go meanwhile
        writer.write(data)
        await writer.drain()


class Yielding(ThreadPoolExecutor):  # asyncio takes no other default executor
    """A thread per task (DuckDB's statements: ``duck.in_thread``); a task that has run
    ``DEMOTE_AFTER_S`` is lowered to ``NICE``, so a long statement yields the cores to
    the node while short ones run at its priority (a worker at nice 10 whole took 6 s
    to answer ``SELECT 1`` on a host at load average 19). The thread ends with its
    task: a thread's nice value cannot be raised again without privileges."""

    def __init__(self) -> None:
        super().__init__(1)  # its own threads are never started
        self._since: dict[int, float] = {}  # running task's thread id -> start (monotonic)
        self._changed = threading.Condition()
        self._watch: threading.Thread | None = None

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        done: Future[T] = Future()

        def run() -> None:
            tid = threading.get_native_id()
            with self._changed:
                self._since[tid] = time.monotonic()
                self._changed.notify()
            try:
                if done.set_running_or_notify_cancel():
                    try:
                        done.set_result(fn(*args, **kwargs))
                    except BaseException as exc:  # the future carries it
                        done.set_exception(exc)
            finally:
                with self._changed:
                    self._since.pop(tid, None)

        if self._watch is None:
            self._watch = threading.Thread(target=self._demote, name="demote", daemon=True)
            self._watch.start()
        threading.Thread(target=run, name="duckdb", daemon=True).start()
        return done

    def _demote(self) -> None:
        """While tasks run, every ``DEMOTE_AFTER_S / 2``: lower the late ones (asleep
        while none runs)."""
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._since))
            time.sleep(DEMOTE_AFTER_S / 2)
            now = time.monotonic()
            with self._changed:
                late = [t for t, since in self._since.items() if now - since > DEMOTE_AFTER_S]
                for t in late:
                    self._since[t] = math.inf  # once
            for t in late:
                with contextlib.suppress(OSError):  # Linux: a thread's nice value by its id
                    os.setpriority(os.PRIO_PROCESS, t, NICE)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass  # its threads end with their tasks


async def serve(sock: socket.socket, work: Work) -> None:
    """Answer the node's requests until it closes its end. DuckDB's statements run in
    the loop's default executor (``duck.in_thread``): ``Yielding``."""
    asyncio.get_running_loop().set_default_executor(Yielding())
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    writer.write(frame(("ready", resident_bytes())))
    running: asyncio.Task[None] | None = None
    while True:
        try:
            msg = await read_frame(reader)
        except (asyncio.IncompleteReadError, ConnectionError):  # the node is gone, or let
            if running is not None:  # this worker go
                running.cancel()
            return
        if msg[0] == "cancel":
            if running is not None and not running.done():
                running.cancel()
        else:
            _, op, args = msg
            running = asyncio.create_task(_answer(work, op, args, writer))


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the node died before the line above
        os._exit(0)


def _import(modules: Sequence[str]) -> None:
    """The node's own modules (it imported them already): a module that fails here is
    logged and left out, its statements then planned without its rules (the rows
    gathered for DuckDB: the same answers, read less directly)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            log.warning("SQL worker: module %s not imported (%r): its planner rules are "
                        "left out", name, exc)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="streamiq SQL worker")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--memory-mb", type=int, required=True)
    ap.add_argument("--spill-dir", default=None)
    ap.add_argument("--spill-mb", type=int, default=0)
    ap.add_argument("--log-level", default="warning")
    ap.add_argument("--log-format", default="auto")
    ap.add_argument("--import", dest="imports", action="append", default=[],
                    help="a module to import first (its query types and planner rules)")
    a = ap.parse_args(argv)
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the node, which stops us
    configure_logging(a.log_level, a.log_format)
    _import(a.imports)
    work = Work(a.memory_mb, a.spill_dir, a.spill_mb)
    try:
        asyncio.run(serve(socket.socket(fileno=a.fd), work))
    finally:
        work.close()
