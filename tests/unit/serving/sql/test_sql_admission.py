"""Which startup makes room when too many connections are authenticating (issue 50):
one that has not answered its password request, the oldest of its address, never one
whose password is being checked; and the bound kept within the open-file limit."""

from __future__ import annotations

import asyncio
import logging
import resource
import socket
import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest
import sqlfake
from sqlfake import FakeEngine, ServerThread, balances
from sqlviews import VIEWS
from startupflood import startup

from streamiq.auth import Principal
from streamiq.errors import Overloaded
from streamiq.serving.sql.admission import Startups, fd_room


class _Closed(list[tuple[str, str]]):
    """The startups closed, as (name, message)."""

    def closer(self, name: str) -> Callable[[Overloaded], None]:
        return lambda error: self.append((name, error.message))


def test_the_oldest_unanswered_startup_of_the_address_makes_room() -> None:
    closed, startups = _Closed(), Startups(bound=100, per_address=3)
    answering = startups.admit("10.0.0.1", closed.closer("answering"))
    answering.answered = True
    startups.admit("10.0.0.1", closed.closer("waiting"))
    startups.admit("10.0.0.2", closed.closer("other address"))
    startups.admit("10.0.0.1", closed.closer("newer"))
    startups.admit("10.0.0.1", closed.closer("newcomer"))  # the address's 4th
    assert [name for name, _ in closed] == ["waiting"]
    assert "had not answered its password request" in closed[0][1]
    assert len(startups) == 4 and startups.evicted == 1


def test_a_connection_that_has_sent_nothing_makes_room_before_one_asked_its_password(
        ) -> None:
    closed, startups = _Closed(), Startups(bound=100, per_address=3)
    startups.admit("10.0.0.1", closed.closer("asked")).started = True
    startups.admit("10.0.0.1", closed.closer("silent"))  # or reset before it was read
    startups.admit("10.0.0.1", closed.closer("asked too")).started = True
    startups.admit("10.0.0.1", closed.closer("newcomer")).started = True
    startups.admit("10.0.0.1", closed.closer("newcomer 2"))
    assert [name for name, _ in closed] == ["silent", "asked"]


def test_a_newcomer_is_refused_when_every_startup_of_its_address_is_answering() -> None:
    closed, startups = _Closed(), Startups(bound=100, per_address=2)
    for name in ("a", "b"):
        startups.admit("10.0.0.1", closed.closer(name)).answered = True
    with pytest.raises(Overloaded, match="all of them answering"):
        startups.admit("10.0.0.1", closed.closer("newcomer"))
    assert closed == [] and len(startups) == 2
    assert startups.admit("10.0.0.2", closed.closer("elsewhere"))  # other addresses: room


def test_past_the_bound_the_busiest_address_makes_room() -> None:
    closed, startups = _Closed(), Startups(bound=4, per_address=3)
    held = [startups.admit("10.0.0.1", closed.closer(f"busy {n}")) for n in range(3)]
    startups.admit("10.0.0.2", closed.closer("quiet"))
    startups.admit("10.0.0.3", closed.closer("newcomer"))
    assert [name for name, _ in closed] == ["busy 0"]
    startups.done(held[0])  # its task ends after it was closed: counted once
    for s in held[1:]:
        startups.done(s)
    assert len(startups) == 2


@pytest.mark.parametrize(("limits", "raised", "room"), [
    ((1024, 1 << 20), 2 * (1024 + 64), 1024),  # raised toward the hard limit
    ((1024, 1024), None, 448),  # cannot be: half of it less the sessions
    ((1 << 20, 1 << 20), None, 1024),
    ((resource.RLIM_INFINITY, resource.RLIM_INFINITY), None, 1024),
], ids=["raised", "clamped", "enough", "unlimited"])
def test_startups_fit_the_open_file_limit(limits: tuple[int, int], raised: int | None,
                                          room: int, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    set_to: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda _: limits)
    monkeypatch.setattr(resource, "setrlimit", lambda _, value: set_to.append(value))
    with caplog.at_level(logging.WARNING, "streamiq.sql"):
        assert fd_room(1024, 64) == room
    assert set_to == ([] if raised is None else [(raised, limits[1])])
    assert ("ulimit -n" in caplog.text) == (room < 1024)


@pytest.fixture()
def slow_server() -> Iterator[tuple[ServerThread, threading.Event, threading.Event]]:
    """A server (2 startups per address) whose token check waits for ``release``, after
    setting ``checking``."""
    srv = ServerThread(FakeEngine(list(VIEWS.values()), {"balances": balances()}),
                       max_startups=8,
                       idle_timeout_s=0)
    checking, release = threading.Event(), threading.Event()

    async def slow(user: str, password: str) -> Principal:
        checking.set()
        while not release.is_set():
            await asyncio.sleep(0.01)
        return await sqlfake.authenticate(user, password)

    srv.server.authenticate = slow
    yield srv, checking, release
    release.set()
    srv.stop()


def _startup(port: int) -> socket.socket:
    s = startup(port)  # tests/startupflood.py: a startup message, never a password
    assert s.recv(9)[:1] == b"R"  # the password is asked
    return s


def test_a_client_whose_password_is_being_checked_is_never_closed_for_newer_startups(
        slow_server: tuple[ServerThread, threading.Event, threading.Event]) -> None:
    srv, checking, release = slow_server
    got: list[object] = []

    def client() -> None:
        try:
            with psycopg.connect(srv.dsn()) as c:
                got.append(c.execute("SELECT count FROM balances WHERE account = '3'")
                           .fetchone())
        except psycopg.Error as exc:
            got.append(exc)

    thread = threading.Thread(target=client, daemon=True)
    thread.start()
    assert checking.wait(30)
    held = [_startup(srv.port) for _ in range(6)]  # 3 times the address's share
    try:
        assert held[0].recv(4096)[:1] == b"E"  # unanswered ones made room for each other
        release.set()
        thread.join(30)
        assert got == [(3,)]
        exposed = {f.name: f.samples[0].value for f in srv.server.metrics()}
        assert exposed["streamiq_sql_startups_evicted"] == 5  # each newer one closed one
        assert exposed["streamiq_sql_startups"] == 1  # the newest, still asked its password
    finally:
        for s in held:
            s.close()
