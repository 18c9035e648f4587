"""What no SQL client can take from a node (issue 38), one part at a time: IN lists
counted before parsing, settings and the plan cache bounded, the SQL workers' memory,
queue, cancel and spill folder, and the server's startups, sessions per address, idle
sessions, expired tokens and long messages (a PgServer with psycopg and raw sockets)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import struct
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlfake
from sqlfake import FakeEngine, ServerThread, balances, order_counts
from sqlviews import BALANCES, VIEWS
from waits import until

from streamiq.auth import Principal
from streamiq.errors import BadSql, Overloaded, TooManyRows
from streamiq.serving.sql import pool as pool_module
from streamiq.serving.sql import session as session_module
from streamiq.serving.sql.guard import longest_in_list
from streamiq.serving.sql.pool import SqlWorkers
from streamiq.serving.sql.session import (
    NAMED,
    NAMED_BYTES,
    PLAN_BYTES,
    Prepared,
    Session,
    prepare_statement,
)
from streamiq.serving.sql.settings import MAX_SETTINGS, MAX_VALUE, Settings
from streamiq.serving.sql.worker import NICE, Yielding

ROWS = {"balances": balances(), "order_counts": order_counts()}
LONG = "SELECT count(*) FROM range(1000000000000) WHERE range % 7 = 3"


@pytest.mark.parametrize(("sql", "longest"), [
    ("SELECT 1", 0),
    ("SELECT * FROM t WHERE a IN ('a', 'b,c', 'd')", 3),
    ("SELECT * FROM t WHERE a in (1, 2, (3), 4) AND b IN (SELECT x, y FROM z WHERE q IN (1, 2))",
     4),
    ("SELECT f(1, 2, 3) -- in (1, 2, 3, 4, 5)", 0),
    ("SELECT 1 /* a IN (1, 2, 3) */ WHERE a IN ($1, $2)", 2),
    ("SELECT 1 WHERE a IN ($$x, y$$, 2)", 2),
    ('SELECT "IN (", x FROM t WHERE x IN (1, 2', 2),
])
def test_in_lists_are_counted_in_the_text(sql: str, longest: int) -> None:
    assert longest_in_list(sql) == longest


def test_a_long_in_list_is_refused_before_it_is_parsed(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_: Any) -> Any:
        raise AssertionError("parsed")

    monkeypatch.setattr(session_module, "make_plan", never)
    keys = ",".join(f"'{i}'" for i in range(101))
    with pytest.raises(TooManyRows, match="IN list of 101 values, more than 100"):
        prepare_statement(f"SELECT * FROM balances WHERE account IN ({keys})", [BALANCES], 100)


def test_session_settings_are_bounded_in_number_and_size() -> None:
    s = Settings()
    for i in range(MAX_SETTINGS):
        s.command("SET", f"SET app.s{i} = 'v'")
    s.command("SET", "SET app.s0 = 'again'")  # one already set: not one more
    with pytest.raises(TooManyRows, match="more than 64 settings"):
        s.command("SET", "SET app.one_more = 'v'")
    s.command("RESET", "RESET app.s1")
    s.command("SET", "SET app.one_more = 'v'")
    with pytest.raises(TooManyRows, match="characters"):
        s.command("SET", f"SET app.s2 = '{'x' * (MAX_VALUE + 1)}'")
    with pytest.raises(TooManyRows, match="name of 64 characters"):
        s.command("SET", f"SET {'n' * 64} = 'v'")


class _Planner:
    """What a session asks of the workers, planned in this process."""

    def __init__(self) -> None:
        self.workers = self
        self.planned = 0

    async def run(self, op: str, *args: Any) -> Any:
        assert op == "prepare"
        self.planned += 1
        return prepare_statement(*args)


async def test_the_plan_cache_is_bounded_by_bytes() -> None:
    planner = _Planner()
    session = Session(Principal("p", frozenset({"views:*"})), [BALANCES], None,  # type: ignore[arg-type]
                      planner, 1, b"1234")  # type: ignore[arg-type]
    pad = "x" * 20_000  # each statement about 80 kB planned: the cache keeps some only
    texts = [f"SELECT account FROM balances WHERE account = '{i}' -- {pad}" for i in range(60)]
    for sql in texts:
        assert isinstance(await session.prepare(sql), Prepared)
    assert session._plan_bytes <= PLAN_BYTES
    assert 0 < len(session._plans) < len(texts)
    await session.prepare(texts[-1])  # the newest is kept
    assert planner.planned == len(texts)
    huge = f"SELECT 1 FROM balances -- {'y' * (PLAN_BYTES // 4)}"
    await session.prepare(huge)
    assert huge not in session._plans  # longer than a quarter of the cache: not kept


@asynccontextmanager
async def _workers(tmp_path: Path, **kw: Any) -> AsyncIterator[SqlWorkers]:
    """Two workers of 128 MB each, one request may wait (on the test's own loop)."""
    pool = SqlWorkers(2, memory_mb=256, spill_dir=tmp_path / "spill", spill_mb=64,
                      max_queued=1, **kw)
    await pool.start()
    try:
        yield pool
    finally:
        await pool.close()


VIEW_SET = (BALANCES,)


async def test_a_worker_past_its_memory_share_is_stopped_and_the_next_request_served(
        tmp_path: Path) -> None:
    async with _workers(tmp_path) as workers:
        await _stopped_past_its_share(workers)


async def _stopped_past_its_share(workers: SqlWorkers) -> None:
    with pytest.raises(TooManyRows, match="more than 128 MB"):
        await workers.run("catalog", VIEW_SET, "SELECT len(range(30000000))", 10)
    assert workers.replaced == 1
    answer = await workers.run("catalog", VIEW_SET, "SELECT 41 + 1", 10)
    assert answer.rows == [(42,)]


async def test_a_cancelled_request_is_interrupted_in_its_worker(tmp_path: Path) -> None:
    async with _workers(tmp_path, cancel_grace_s=60) as workers:  # not stopped for slowness
        await _interrupted(workers)


async def _interrupted(workers: SqlWorkers) -> None:
    running = asyncio.ensure_future(workers.run("catalog", VIEW_SET, LONG, 10))
    await until(lambda: workers._long == 1, "the long request in a worker", 60)
    await asyncio.sleep(0.2)  # DuckDB is in it
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert workers.replaced == 0  # interrupted, not stopped
    assert (await workers.run("catalog", VIEW_SET, "SELECT 1", 10)).rows == [(1,)]


async def test_one_worker_is_kept_for_planning_and_the_queue_is_bounded(
        tmp_path: Path) -> None:
    async with _workers(tmp_path) as workers:
        await _kept_for_planning(workers)


async def _kept_for_planning(workers: SqlWorkers) -> None:
    first = asyncio.ensure_future(workers.run("catalog", VIEW_SET, LONG, 10))
    await until(lambda: workers._long == 1, "the first long request in a worker", 60)
    second = asyncio.ensure_future(workers.run("catalog", VIEW_SET, LONG, 10))
    await until(lambda: workers._waiting == 1, "the second one waiting")
    await until(lambda: len(workers._idle) == 1, "a second worker started meanwhile", 60)
    with pytest.raises(Overloaded, match="waiting for a worker"):  # max_queued=1
        await workers.run("catalog", VIEW_SET, "SELECT 1", 10)
    planned = await workers.run("prepare", "SELECT * FROM balances", VIEW_SET, 100)
    assert isinstance(planned, Prepared) and planned.plan is not None  # the kept worker
    with pytest.raises(BadSql):  # an error in the worker is raised as its own class
        await workers.run("prepare", "SELEC nothing", VIEW_SET, 100)
    for task in (first, second):
        task.cancel()
    await asyncio.gather(first, second, return_exceptions=True)


async def test_workers_start_when_requests_wait_and_stop_when_idle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool_module, "IDLE_S", 0.5)
    async with _workers(tmp_path) as workers:
        assert len(workers._slots) == 1  # one to start with
        held = [await workers._acquire(False) for _ in range(2)]  # the second waits: another
        assert len(workers._all) == 2
        for w in held:
            await workers._release(w, False)
        await until(lambda: len(workers._all) == 1, "the idle one stopped", 30)
        assert (await workers.run("catalog", VIEW_SET, "SELECT 1", 10)).rows == [(1,)]


async def test_the_spill_folder_is_emptied_at_start(tmp_path: Path) -> None:
    left = tmp_path / "spill" / "w0" / "duckdb_temp_block-1.block"
    left.parent.mkdir(parents=True)
    left.write_bytes(b"x" * 4096)
    pool = SqlWorkers(1, spill_dir=tmp_path / "spill", spill_mb=16)
    await pool.start()
    try:
        assert not left.exists()
    finally:
        await pool.close()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    srv = ServerThread(FakeEngine(list(VIEWS.values()), ROWS), max_connections=6,
                       max_per_address=3, max_startups=8, idle_timeout_s=0,
                       max_message_bytes=4096)
    yield srv
    srv.stop()


def _startup(port: int) -> socket.socket:
    """A connection that sends a startup message and never the password."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    params = b"user\x00attacker\x00\x00"
    s.sendall(struct.pack("!ii", 8 + len(params), 196608) + params)
    assert s.recv(9)[:1] == b"R"  # the password is asked
    return s


def test_startups_past_their_bound_close_the_oldest_of_their_address(
        server: ServerThread) -> None:
    held = [_startup(server.port) for _ in range(2)]  # 8 startups: 2 per address
    try:
        third = _startup(server.port)
        refused = held[0].recv(4096)  # the oldest was closed to make room
        assert refused[:1] == b"E" and b"C53300" in refused and b"authenticating" in refused
        assert held[0].recv(4096) == b""
        with psycopg.connect(server.dsn()) as c:  # a client evicts one too, and gets in
            assert c.execute("SELECT count FROM balances WHERE account = '3'").fetchone() == (3,)
        third.close()
    finally:
        for s in held:
            s.close()


def test_sessions_from_one_address_are_bounded(server: ServerThread) -> None:
    held = [psycopg.connect(server.dsn()) for _ in range(3)]
    try:
        with pytest.raises(psycopg.OperationalError, match=r"too many clients already from "
                           r"127\.0\.0\.1"):
            psycopg.connect(server.dsn())
    finally:
        for c in held:
            c.close()


def test_a_message_past_the_bound_is_refused_54000(server: ServerThread) -> None:
    with psycopg.connect(server.dsn()) as c:
        with pytest.raises(psycopg.OperationalError) as refused:
            c.execute("SELECT 1 -- " + "x" * 5000)
        assert refused.value.sqlstate == "54000"
        assert c.closed


def test_a_statement_after_the_token_expired_ends_the_session(server: ServerThread) -> None:
    sqlfake.TOKENS["short-lived"] = Principal("s", frozenset({"views:*"}))
    try:
        with psycopg.connect(server.dsn("short-lived"), autocommit=True) as c:
            assert c.execute("SELECT count FROM balances WHERE account = '4'").fetchone() == (4,)
            del sqlfake.TOKENS["short-lived"]  # as an expiry: the token is no longer valid
            with pytest.raises(psycopg.OperationalError, match="no longer valid") as refused:
                c.execute("SELECT count FROM balances WHERE account = '4'")
            assert refused.value.sqlstate == "28P01"
            assert c.closed
    finally:
        sqlfake.TOKENS.pop("short-lived", None)


def test_an_idle_session_is_closed_57P05() -> None:
    srv = ServerThread(FakeEngine(list(VIEWS.values()), ROWS), idle_timeout_s=2)
    try:
        with psycopg.connect(srv.dsn(), autocommit=True) as busy, \
                psycopg.connect(srv.dsn(), autocommit=True) as idle:
            deadline = time.monotonic() + 30
            while srv.server.sessions and len(srv.server.sessions) > 1:
                busy.execute("SELECT 1")  # this one keeps running statements
                assert time.monotonic() < deadline, "the idle session was never closed"
                time.sleep(0.05)
            with pytest.raises(psycopg.OperationalError) as closed:
                idle.execute("SELECT 1")
            assert closed.value.sqlstate in ("57P05", None), closed.value
            assert busy.execute("SELECT 2").fetchone() == (2,)
    finally:
        srv.stop()


def test_a_statement_past_its_first_tenth_of_a_second_is_lowered_to_nice_10() -> None:
    pool = Yielding()
    base = os.getpriority(os.PRIO_PROCESS, 0)

    def own_nice(after: float) -> int:
        time.sleep(after)
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    assert pool.submit(own_nice, 0).result(30) == base  # short: the node's priority
    assert pool.submit(own_nice, 1.0).result(30) >= max(base, NICE)  # long: lowered
    assert pool.submit(own_nice, 0).result(30) == base  # a new thread for each


async def test_a_worker_holds_none_of_the_node_s_settings(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMIQ_JWT_SECRET", "a-secret")
    async with _workers(tmp_path) as workers:
        await workers.ready()
        environ = Path(f"/proc/{workers.pids[0]}/environ").read_bytes()
    assert b"a-secret" not in environ and b"STREAMIQ_" not in environ


async def test_a_worker_that_died_idle_is_replaced_before_a_request_meets_it(
        tmp_path: Path) -> None:
    async with _workers(tmp_path) as workers:
        await workers.ready()
        (worker,) = workers._all
        os.kill(worker.pid, signal.SIGKILL)  # as the OOM killer would, while it waits
        await until(lambda: not worker.alive(), "the worker dead")
        assert (await workers.run("catalog", VIEW_SET, "SELECT 7", 10)).rows == [(7,)]
        assert workers.replaced == 1


async def test_a_worker_that_left_spill_files_is_replaced_and_its_folder_emptied(
        tmp_path: Path) -> None:
    async with _workers(tmp_path) as workers:
        async with workers.hold() as w:  # a long request
            left = tmp_path / "spill" / f"w{w.index}" / "duckdb_temp_block-7.block"
            left.parent.mkdir(parents=True, exist_ok=True)
            left.write_bytes(b"x" * 4096)  # as if DuckDB had not removed it
        assert workers.replaced == 1
        await until(lambda: not left.exists(), "the folder emptied", 60)
        assert (await workers.run("catalog", VIEW_SET, "SELECT 3", 10)).rows == [(3,)]


def test_named_prepared_statements_are_bounded_in_number_and_bytes() -> None:
    small = Prepared("SELECT 1", None, None, 0)
    named: dict[str, tuple[Prepared, Any]] = {f"s{i}": (small, []) for i in range(NAMED - 1)}
    Session.may_keep("s0", small, named)  # replaces one: not one more
    Session.may_keep("", small, {**named, "x": (small, [])})  # the unnamed one: not held
    with pytest.raises(TooManyRows, match="prepared statements"):
        Session.may_keep("one-more", small, {**named, "x": (small, [])})
    big = Prepared("x" * (NAMED_BYTES // 8), None, None, 0)  # 4 x its text, as planned
    with pytest.raises(TooManyRows, match="MB of them"):
        Session.may_keep("big", big, {"a": (big, [])})
