"""A SQL worker process (``main``, started by ``pool.py``): parses and plans
statements (sqlglot) and runs DuckDB (the catalog's queries and descriptions, the final
step over gathered rows) for one node, which started it (``pool.py``).

Nothing a client sends is parsed or run in the node's process: a statement's parse
(sqlglot: about 150 MB and a second for an 80,000-value IN list) and DuckDB's
allocations (a list function's can pass its ``memory_limit``) grow this process, which
the node stops past its share of ``--sql-memory-mb`` and replaces. The worker runs at a
lower CPU priority than the node (``pool.NICE``, taken before its imports), so its
statements yield the cores to the node's lookups and aggregates. It serves one request
at a time; a ``cancel`` frame interrupts DuckDB (a parse runs to its end: the node
stops a worker that does not answer soon after a cancel). It exits when the node's end
of its socket closes, and with the node (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import socket
from collections.abc import Sequence
from typing import Any

from streamiq.errors import Canceled, StreamiqError
from streamiq.logs import configure_logging
from streamiq.serving.sql.catalog import Catalogs
from streamiq.serving.sql.duck import Duck, arrow_table
from streamiq.serving.sql.frames import dump_error, frame, read_frame
from streamiq.serving.sql.pgshims import rewrite
from streamiq.serving.sql.protocol import split_statements
from streamiq.serving.sql.session import prepare_statement

__all__ = ["Work", "main", "resident_bytes", "serve"]

log = logging.getLogger("streamiq.sql.worker")

_PR_SET_PDEATHSIG = 1


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
        if op == "describe":  # (views, sql, a catalog query's) -> Schema
            views, sql, catalog = args
            return await asyncio.to_thread(self.catalogs.of(views).describe,
                                           rewrite(sql) if catalog else sql)
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


async def serve(sock: socket.socket, work: Work) -> None:
    """Answer the node's requests until it closes its end."""
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


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="streamiq SQL worker")
    ap.add_argument("--fd", type=int, required=True)
    ap.add_argument("--memory-mb", type=int, required=True)
    ap.add_argument("--spill-dir", default=None)
    ap.add_argument("--spill-mb", type=int, default=0)
    ap.add_argument("--log-level", default="warning")
    ap.add_argument("--log-format", default="auto")
    a = ap.parse_args(argv)
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the node, which stops us
    configure_logging(a.log_level, a.log_format)
    work = Work(a.memory_mb, a.spill_dir, a.spill_mb)
    try:
        asyncio.run(serve(socket.socket(fileno=a.fd), work))
    finally:
        work.close()
