"""DuckDB as the final step: SQL over gathered rows as Arrow, on a cursor per query.

DuckDB runs only in a node's SQL workers (``worker.py``), never in the node's process:
a client's SQL can allocate past DuckDB's own ``memory_limit`` (``len(range(1e8))``
took 7 GB in one), which a worker answers by being stopped (``pool.py``). DuckDB's
exceptions become streamiq errors here, at its edge, so the SQLSTATE mapping
(``streamiq._sqlstate``) sees one hierarchy. Queries run in a thread of the worker
(``asyncio.to_thread``); a cancel interrupts the cursor. A database spills only where
it is told (``temp_directory``, within ``max_temp_mb``); without one it never spills
(DuckDB's default is ``.tmp`` in the current directory).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa

from streamiq.errors import (
    BadRequest,
    BadSql,
    Canceled,
    Forbidden,
    StreamiqError,
    TooManyRows,
    UnknownView,
)
from streamiq.serving.sql.engine import Row
from streamiq.serving.sql.types import arrow_of, coerce

__all__ = ["LOCKDOWN", "Answer", "Duck", "arrow_table", "connect", "duck_errors", "in_thread",
           "run_cursor"]


_INTERRUPT_EVERY_S = 0.05


@dataclass
class Answer:
    """A statement's result: columns (DuckDB type names) and rows, or a command's tag."""

    names: tuple[str, ...]
    types: tuple[str, ...]
    rows: list[tuple[Any, ...]] | None  # None: no rows to describe (SET, BEGIN)
    tag: str = "SELECT"
    notices: list[str] = field(default_factory=list)

    @classmethod
    def command(cls, tag: str) -> Answer:
        return cls((), (), None, tag)


@contextmanager
def duck_errors() -> Iterator[None]:
    """DuckDB's exceptions as streamiq errors (42601, 42P01, 22023, 57014, 54000...)."""
    try:
        yield
    except duckdb.ParserException as exc:
        raise BadSql(f"syntax error: {_first(exc)}") from None
    except duckdb.CatalogException as exc:
        text = _first(exc)
        if "Table with name" in text:
            name = text.split("Table with name", 1)[1].split()[0]
            raise UnknownView(f'relation "{name}" does not exist', view=name) from None
        raise BadSql(text) from None
    except duckdb.BinderException as exc:
        raise BadSql(_first(exc)) from None
    except duckdb.PermissionException as exc:
        raise Forbidden(f"not allowed here: {_first(exc)}") from None
    except duckdb.InterruptException:
        raise Canceled("canceling statement due to user request") from None
    except duckdb.OutOfMemoryException as exc:
        raise TooManyRows(f"out of the SQL step's memory: {_first(exc)}") from None
    except (duckdb.ConversionException, duckdb.InvalidInputException,
            duckdb.OutOfRangeException, duckdb.NotImplementedException) as exc:
        raise BadRequest(_first(exc)) from None
    except duckdb.Error as exc:
        raise StreamiqError(f"SQL step failed: {_first(exc)}") from None


def _first(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def run_cursor(cur: duckdb.DuckDBPyConnection, sql: str, limit: int) -> Answer:
    """Run ``sql``; more than ``limit`` rows is TooManyRows (54000)."""
    with duck_errors():
        cur.execute(sql)
        if cur.description is None:
            return Answer.command("SELECT")
        names = tuple(str(d[0]) for d in cur.description)
        types = tuple(str(d[1]) for d in cur.description)
        rows = cur.fetchmany(limit + 1)
    if len(rows) > limit:
        raise TooManyRows(f"the result has more than {limit} rows (the row limit); add a "
                          "LIMIT or narrow the WHERE", limit=limit)
    return Answer(names, types, rows)


def arrow_table(columns: Sequence[tuple[str, str]], rows: Sequence[Row]) -> Any:
    """Rows as Arrow with the columns' DuckDB types (``(name, type)`` in order)."""
    arrays = {}
    for name, duck in columns:
        conv = coerce(duck)
        arrays[name] = pa.array([None if (v := r.get(name)) is None else conv(v) for r in rows],
                                type=arrow_of(duck))
    return pa.table(arrays)


async def in_thread(cur: duckdb.DuckDBPyConnection, work: Callable[[], Answer]) -> Answer:
    """``work`` (using ``cur``) in a worker thread; a cancelled task stops it and waits
    for the thread (the cursor is never closed under a running query). An interrupt
    only reaches a query already running, so it is repeated until the thread is done,
    and ``work`` does not start at all once cancelled."""
    cancelled = threading.Event()

    def guarded() -> Answer:
        if cancelled.is_set():
            raise Canceled("canceling statement due to user request")
        return work()

    running = asyncio.ensure_future(asyncio.to_thread(guarded))
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        cancelled.set()
        while not running.done():
            cur.interrupt()
            with contextlib.suppress(asyncio.CancelledError):  # still wait for the thread
                await asyncio.wait([running], timeout=_INTERRUPT_EVERY_S)
        if not running.cancelled():
            running.exception()  # retrieved: the interrupt's error is not logged as lost
        raise


#: no files, no network, no extensions, settings locked: a client's SQL reaches only what
#: the front end registered (the DuckDB step's tables, the catalog's empty ones)
LOCKDOWN = ("SET enable_external_access = false", "SET autoinstall_known_extensions = false",
            "SET autoload_known_extensions = false", "SET lock_configuration = true")


def connect(memory_limit: str, setup: Sequence[str] = (), *, spill_dir: str | None = None,
            spill_mb: int = 0) -> duckdb.DuckDBPyConnection:
    """A private in-memory database: ``setup`` run, then locked down (``LOCKDOWN``). It
    spills to ``spill_dir`` up to ``spill_mb`` MB, and nowhere without them."""
    config: dict[str, Any] = {"threads": 1, "memory_limit": memory_limit,
                              "temp_directory": spill_dir if spill_dir and spill_mb else ""}
    if spill_dir and spill_mb:
        config["max_temp_directory_size"] = f"{spill_mb}MB"
    db = duckdb.connect(config=config)
    for stmt in (*setup, *LOCKDOWN):
        db.execute(stmt)
    return db


class Duck:
    """One in-memory DuckDB database for the SQL step: no data of its own, a cursor per
    query with its Arrow tables registered, one thread each, a memory bound, spilling
    only to ``spill_dir`` within ``spill_mb`` MB."""

    def __init__(self, memory_limit: str = "512MB", spill_dir: str | None = None,
                 spill_mb: int = 0) -> None:
        self._db = connect(memory_limit, spill_dir=spill_dir, spill_mb=spill_mb)

    async def run(self, sql: str, tables: Mapping[str, Any], limit: int) -> Answer:
        """``sql`` over ``tables`` (name -> Arrow table), on a cursor of its own."""
        cur = self._db.cursor()

        def work() -> Answer:
            for name, table in tables.items():
                cur.register(name, table)
            return run_cursor(cur, sql, limit)

        try:
            return await in_thread(cur, work)
        finally:
            cur.close()

    def close(self) -> None:
        self._db.close()
