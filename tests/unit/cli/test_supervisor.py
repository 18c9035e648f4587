"""``streamiq up``'s supervisor without processes: restart policy, restarts, crash loops,
broker death, stop; and what every part is started with."""

from __future__ import annotations

import re
import signal
import threading
from typing import Any

import pytest

from streamiq.cli.up import (
    Part,
    RestartPolicy,
    Supervisor,
    _all_ready_line,
    _parts,
    describe_exit,
)
from streamiq.config import Settings


def test_backoff_doubles_from_half_a_second_and_gives_up_after_five_in_a_row() -> None:
    p = RestartPolicy()
    # exits far apart in time, but the part never stays ready: backoff keeps growing
    assert [p.exited(t * 1000.0) for t in range(5)] == [0.5, 1, 2, 4, 8]
    assert p.exited(5000.0) is None
    assert p.gave_up_because() == "5 restarts in a row without staying ready 30 s"


def test_backoff_is_capped() -> None:
    p = RestartPolicy(max_delay=3, max_restarts=10)
    assert [p.exited(t * 1000.0) for t in range(5)] == [0.5, 1, 2, 3, 3]


def test_backoff_starts_over_once_the_part_stayed_ready() -> None:
    p = RestartPolicy()
    assert p.exited(0) == 0.5
    p.ready(5)
    assert p.exited(20) == 1  # ready only 15 s: not stable yet
    p.ready(25)
    assert p.exited(55) == 0.5  # ready 30 s: starts over
    assert p.exited(56) == 1


def test_five_restarts_within_sixty_seconds_is_a_crash_loop() -> None:
    p = RestartPolicy(stable_after=1)  # every run counts as stable: only the window applies
    now = 0.0
    for _ in range(5):
        assert p.exited(now) == 0.5
        p.ready(now + 1)
        now += 11
    assert p.exited(now) is None  # a sixth exit 55 s after the first restart
    assert p.gave_up_because() == "5 restarts within 60 s"


def test_restarts_older_than_the_window_do_not_count() -> None:
    p = RestartPolicy(stable_after=1)
    for i in range(5):
        assert p.exited(i * 13.0) is not None
        p.ready(i * 13.0 + 1)
    assert p.exited(61.0) == 0.5  # the restart at t=0 is more than 60 s old


def test_describe_exit() -> None:
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(1) == "code 1"
    assert describe_exit(-200) == "killed by signal 200"


class FakeProc:
    def __init__(self) -> None:
        self.returncode: int | None = None
        self.terminated = False

    def poll(self) -> int | None:
        return self.returncode

    def terminate(self) -> None:
        self.terminated = True
        if self.returncode is None:
            self.returncode = -signal.SIGTERM

    def kill(self) -> None:
        self.returncode = -signal.SIGKILL

    def wait(self, timeout: float | None = None) -> int | None:
        return self.returncode


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class World:
    """Parts backed by fake processes, a fake clock, a settable readiness."""

    def __init__(self, names: list[str], broker: Any = None) -> None:
        self.clock = Clock()
        self.ready: set[str] = set()
        self.spawned: list[str] = []
        self.parts = [Part(n, ["true"], f"at {n}", self._probe) for n in names]
        self.sup = Supervisor(self.parts, broker, all_ready="all parts ready: go",
                              spawn=self._spawn, clock=self.clock)
        self.sup.start_all()

    def _probe(self, part: Part) -> bool:
        return part.name in self.ready

    def _spawn(self, part: Part) -> None:
        part.proc = FakeProc()
        self.spawned.append(part.name)

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)

    def step(self, dt: float = 0.25) -> int | None:
        self.clock.now += dt
        return self.sup.step()


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_a_killed_part_is_restarted_and_announced_ready_again(
        capsys: pytest.CaptureFixture[str]) -> None:
    w = World(["ingest", "node:9002"])
    w.ready = {"ingest", "node:9002"}
    assert w.step() is None
    assert _lines(capsys) == ["streamiq: ingest ready (at ingest)",
                              "streamiq: node:9002 ready (at node:9002)",
                              "streamiq: all parts ready: go"]
    w.ready.discard("node:9002")
    w.part("node:9002").proc.returncode = -signal.SIGKILL
    assert w.step() is None
    (line,) = _lines(capsys)
    assert re.fullmatch(r"streamiq: node:9002 exited at \d\d:\d\d:\d\d \(killed by SIGKILL, "
                        r"up 0 s\); restarting in 0\.5 s \(restart 1\)", line), line
    assert w.part("node:9002").proc is None and w.spawned.count("node:9002") == 1
    assert w.step(0.2) is None  # backoff not over yet
    assert w.spawned.count("node:9002") == 1
    assert w.step(0.4) is None
    assert w.spawned.count("node:9002") == 2
    w.ready.add("node:9002")
    assert w.step() is None
    assert _lines(capsys) == ["streamiq: node:9002 ready again (at node:9002) after restart 1"]
    assert w.part("ingest").proc.poll() is None  # the other part was never touched
    assert w.spawned.count("ingest") == 1


def test_an_exit_like_a_group_signal_waits_for_ups_own_handler(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C / SIGTERM to the process group reaches the children too: their exit is only
    taken for a crash when ``up`` was not told to stop within a second."""
    w = World(["pipeline"])
    w.part("pipeline").proc.returncode = -signal.SIGTERM
    assert w.step() is None
    assert w.step(0.5) is None
    assert _lines(capsys) == []
    assert w.step(0.6) is None
    assert "pipeline exited at" in capsys.readouterr().out


def test_a_crash_looping_part_stops_everything(capsys: pytest.CaptureFixture[str]) -> None:
    w = World(["ingest", "node:9001"])
    for i in range(5):
        w.part("node:9001").proc.returncode = 1
        assert w.step() is None
        assert f"(restart {i + 1})" in capsys.readouterr().out
        for _ in range(40):  # until the backoff (at most 8 s) is over
            w.step()
        assert w.part("node:9001").proc is not None
    w.part("node:9001").proc.returncode = 1
    assert w.step() == 1
    (line,) = _lines(capsys)
    assert re.fullmatch(r"streamiq: node:9001 exited at \d\d:\d\d:\d\d \(code 1, up 2 s\): it is "
                        r"crash-looping \(5 restarts within 60 s\); stopping everything",
                        line), line


class FakeBroker:
    """An embedded broker whose starts succeed ``starts_ok`` times, then fail."""

    bootstrap_servers = "127.0.0.1:9092"

    def __init__(self, starts_ok: int) -> None:
        self.proc = FakeProc()
        self.starts_ok = starts_ok
        self.starts = 0

    def start(self) -> FakeBroker:
        from streamiq.kafka.broker import BrokerError

        self.starts += 1
        if self.starts > self.starts_ok:
            raise BrokerError("port in use")
        self.proc = FakeProc()
        return self


def test_a_dead_embedded_broker_is_restarted_on_its_log(
        capsys: pytest.CaptureFixture[str]) -> None:
    broker = FakeBroker(starts_ok=1)
    w = World(["ingest"], broker=broker)
    assert w.step() is None
    broker.proc.returncode = -signal.SIGKILL
    assert w.step() is None  # restarted: the parts keep running, nothing restarted
    assert broker.starts == 1 and broker.proc.returncode is None
    assert w.part("ingest").restarts == 0
    died, ready = _lines(capsys)
    assert re.fullmatch(r"streamiq: the embedded broker exited at \d\d:\d\d:\d\d \(killed by "
                        r"SIGKILL\); restarting it on its log", died), died
    assert ready == "streamiq: embedded broker ready again on 127.0.0.1:9092"


def test_a_broker_that_cannot_be_restarted_stops_everything(
        capsys: pytest.CaptureFixture[str]) -> None:
    broker = FakeBroker(starts_ok=0)
    w = World(["ingest"], broker=broker)
    broker.proc.returncode = 1
    assert w.step() == 1
    lines = _lines(capsys)
    assert broker.starts == 3 and len(lines) == 5, lines
    assert lines[1] == ("streamiq: the embedded broker did not start (try 1 of 3): port in use")
    assert lines[-1] == "streamiq: the embedded broker cannot be restarted: stopping everything"


def test_stop_terminates_nodes_first_and_restarts_nothing() -> None:
    w = World(["ingest", "pipeline", "node:9001"])
    order: list[str] = []
    for p in w.parts:
        p.proc.terminate = (lambda p=p: (order.append(p.name), FakeProc.terminate(p.proc)))
    w.part("pipeline").proc = None  # waiting for its restart: nothing to stop
    w.part("pipeline").restart_at = w.clock.now
    w.sup.stop()
    assert order == ["node:9001", "ingest"]
    assert w.spawned == ["ingest", "pipeline", "node:9001"]


def test_up_runs_both_scenarios_by_default_and_gives_every_part_the_same_app() -> None:
    s = Settings(ingest_port=8181)
    assert s.app == "bank,orders"
    for part in _parts(s, 3, 9101):
        i = part.argv.index("--app")
        assert part.argv[i + 1] == "bank,orders", part.name
    from streamiq.views.base import load_app

    line = _all_ready_line(s, load_app(s.app).topics, 3, 9101)
    assert "POST http://127.0.0.1:8181/account/{id}?amount=N or http://127.0.0.1:8181/orders" \
        in line
    assert "127.0.0.1:9101-9103" in line


def test_run_ticks_with_the_parts_after_every_step() -> None:
    w = World(["ingest", "node:9001"])
    w.ready = {"ingest"}
    stopping = threading.Event()
    seen: list[list[bool]] = []

    def tick(parts: list[Part]) -> None:
        seen.append([p.ever_ready for p in parts])
        w.ready.add("node:9001")
        if len(seen) == 2:
            stopping.set()

    assert w.sup.run(stopping, tick=tick) == 0
    assert seen == [[True, False], [True, True]]
