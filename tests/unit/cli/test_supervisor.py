"""``streamiq up``'s supervisor without processes: restart policy (capped backoff, no
give-up), restarts, crash loops that never stop the other parts, broker death, stop, the
state file ``status`` reads; and what every part is started with."""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from streamiq.cli.supervisor import (
    Part,
    RestartPolicy,
    Supervisor,
    _relay,
    describe_exit,
    keep_output,
    say,
    write_state,
)
from streamiq.cli.up import _all_ready_line, _parts
from streamiq.config import Settings


def test_backoff_doubles_from_one_second_to_a_cap_of_thirty_and_never_gives_up() -> None:
    p = RestartPolicy()
    # exits far apart in time, but the part never stays ready: backoff grows to the cap
    delays = [p.exited(t * 1000.0) for t in range(40)]
    assert delays[:7] == [1, 2, 4, 8, 16, 30, 30]
    assert delays[7:] == [30] * 33  # retried for ever, never None
    assert p.crash_looping and p.streak == 40


def test_backoff_cap_is_the_policys() -> None:
    p = RestartPolicy(max_delay=3)
    assert [p.exited(t * 1000.0) for t in range(5)] == [1, 2, 3, 3, 3]


def test_ups_parts_take_the_cap_from_restart_max_s() -> None:
    assert {p.policy.max_delay for p in _parts(Settings(), 2, 9101)} == {30.0}
    assert {p.policy.max_delay for p in _parts(Settings(restart_max_s=8), 2, 9101)} == {8.0}


def test_ups_nodes_take_the_store_kind() -> None:
    for kind in ("rocksdb", "memory"):
        nodes = [p for p in _parts(Settings(store=kind), 2, 9101) if p.name.startswith("node")]
        assert len(nodes) == 2 and all(
            p.argv[p.argv.index("--store") + 1] == kind for p in nodes), kind


def test_backoff_starts_over_once_the_part_stayed_ready() -> None:
    p = RestartPolicy()
    assert p.exited(0) == 1
    p.ready(5)
    assert p.exited(60) == 2  # ready only 55 s: not stable yet
    p.ready(70)
    assert p.exited(130) == 1  # ready 60 s: starts over
    assert p.exited(131) == 2


def test_crash_looping_from_the_third_exit_in_a_row_until_it_stays_ready() -> None:
    p = RestartPolicy()
    p.exited(0)
    p.exited(10)
    assert not p.crash_looping
    p.exited(20)
    assert p.crash_looping
    p.ready(30)
    p.exited(100)  # stayed ready 70 s: this exit is the first of a new streak
    assert not p.crash_looping and p.streak == 1


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

    def __init__(self, names: list[str], broker: Any = None,
                 out: pytest.CaptureFixture[str] | None = None) -> None:
        self.capsys = out
        self.out: list[str] = []  # every line printed so far (with ``out``)
        self.clock = Clock()
        self.ready: set[str] = set()
        self.spawned: list[str] = []
        self.parts = [Part(n, ["true"], f"at {n}", self._probe) for n in names]
        self.changes: list[list[dict[str, Any]]] = []
        self.sup = Supervisor(self.parts, broker,
                              announce=lambda: ["streamiq: all parts ready: go", "  token"],
                              spawn=self._spawn, clock=self.clock,
                              changed=lambda parts, now: self.changes.append(
                                  [p.state(now) for p in parts]))
        self.sup.start_all()

    def _probe(self, part: Part) -> bool:
        return part.name in self.ready

    def _spawn(self, part: Part) -> None:
        part.proc = FakeProc()
        self.spawned.append(part.name)

    def part(self, name: str) -> Part:
        return next(p for p in self.parts if p.name == name)

    def last_out(self) -> str:
        assert self.capsys is not None
        self.out += self.capsys.readouterr().out.splitlines()
        return self.out[-1]

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
                              "streamiq: all parts ready: go", "  token"]
    w.ready.discard("node:9002")
    w.part("node:9002").proc.returncode = -signal.SIGKILL
    assert w.step() is None
    (line,) = _lines(capsys)
    assert re.fullmatch(r"streamiq: node:9002 exited at \d\d:\d\d:\d\d \(killed by SIGKILL, "
                        r"up 0 s\); restarting in 1 s \(restart 1\)", line), line
    assert w.part("node:9002").proc is None and w.spawned.count("node:9002") == 1
    assert w.step(0.5) is None  # backoff not over yet
    assert w.spawned.count("node:9002") == 1
    assert w.step(0.6) is None
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


def _crash(w: World, name: str) -> float:
    """Make ``name`` exit with code 1, then step until it is started again; the delay
    its restart line announced."""
    w.part(name).proc.returncode = 1
    assert w.step() is None
    said = re.search(r"restarting in ([\d.]+) s", w.last_out())
    assert said is not None, w.out
    delay = float(said.group(1))
    while w.part(name).proc is None:
        assert w.step() is None  # a crash loop never stops everything
    return delay


def test_a_crash_looping_part_is_retried_with_capped_backoff_while_the_others_run(
        capsys: pytest.CaptureFixture[str]) -> None:
    w = World(["ingest", "node:9001"], out=capsys)
    w.ready = {"ingest"}
    w.step()
    ingest = w.part("ingest").proc
    delays, waited = [], []
    for _ in range(9):
        down = w.clock.now
        delays.append(_crash(w, "node:9001"))
        waited.append(w.clock.now - down)
    assert delays == [1, 2, 4, 8, 16, 30, 30, 30, 30]
    assert all(d <= t <= d + 0.5 for d, t in zip(delays, waited, strict=True)), waited
    assert w.spawned.count("node:9001") == 10 and w.part("node:9001").restarts == 9
    assert w.part("ingest").proc is ingest and w.spawned.count("ingest") == 1
    assert ingest.poll() is None and not ingest.terminated
    assert re.search(r"\(restart 9, crash-looping: 9 exits without staying ready 60 s; the "
                     r"other parts keep serving\)$", w.out[-1]), w.out[-1]
    # it comes back, stays ready a minute: the next crash waits 1 s again
    w.ready.add("node:9001")
    w.step()
    assert w.part("node:9001").ready and w.last_out() == "  token"  # the first time
    assert w.out[-3:-1] == ["streamiq: node:9001 ready (at node:9001)",
                            "streamiq: all parts ready: go"]
    w.step(61)
    assert _crash(w, "node:9001") == 1


def test_the_state_file_says_restarts_and_crash_loops(tmp_path: Path) -> None:
    w = World(["ingest", "node:9001"])
    for _ in range(3):
        w.part("node:9001").proc.returncode = 1
        w.step()
        path = tmp_path / "up.json"
        write_state(path, w.parts, w.clock.now)
        doc = json.loads(path.read_text())
        while w.part("node:9001").proc is None:
            w.step()
    node = doc["parts"][1]
    assert node["name"] == "node:9001" and node["restarts"] == 3 and node["crash_looping"]
    assert node["restart_in_s"] == 4 and node["last_exit"].startswith("code 1 at ")
    assert doc["parts"][0]["restarts"] == 0 and not doc["parts"][0]["crash_looping"]
    metrics = (tmp_path / "up.prom").read_text()
    assert 'streamiq_up_part_restarts_total{part="node:9001"} 3\n' in metrics
    assert 'streamiq_up_part_crash_looping{part="node:9001"} 1\n' in metrics
    assert 'streamiq_up_part_crash_looping{part="ingest"} 0\n' in metrics
    assert "# TYPE streamiq_up_part_restarts_total counter\n" in metrics
    # every start, exit and readiness was handed to ``changed``
    assert [c[1]["restarts"] for c in w.changes].count(3) >= 2


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

    def recording(part: Part, proc: FakeProc) -> Callable[[], None]:
        def terminate() -> None:
            order.append(part.name)
            FakeProc.terminate(proc)
        return terminate

    for p in w.parts:
        p.proc.terminate = recording(p, p.proc)
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


@pytest.mark.parametrize("given", [
    Settings(), Settings(spark_config={"spark.driver.memory": "1g"}, warmup=False,
                         kafka_config={"client.id": "x"}, restart_max_s=8)])
def test_every_part_up_starts_takes_the_flags_up_gives_it(
        given: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each part's argv parses as that command's flags, to the settings up has (a part
    refusing its own flags crash-loops the demo)."""
    from streamiq.cli.main import COMMANDS, build_parser, settings_from_args

    monkeypatch.setenv("STREAMIQ_JWT_SECRET", "x" * 32)  # up's secrets travel in the env
    monkeypatch.setenv("STREAMIQ_CLUSTER_SECRET", "y" * 32)
    for part in _parts(given, 2, 9101):
        args = build_parser().parse_args(part.argv[3:])  # after python -m streamiq
        got = settings_from_args(args, COMMANDS[args.command][1])
        assert got.kafka_config == given.kafka_config, part.name
        if part.name == "pipeline":
            assert (got.spark_config, got.warmup) == (given.spark_config, given.warmup)


def test_ups_nodes_take_sql_ports_they_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes 9001-9003 answer SQL on 5433-5435 (none with --sql-port 0): the flag each
    node is given parses to its setting."""
    from streamiq.cli.main import COMMANDS, build_parser, settings_from_args

    monkeypatch.setenv("STREAMIQ_JWT_SECRET", "x" * 32)
    monkeypatch.setenv("STREAMIQ_CLUSTER_SECRET", "y" * 32)
    nodes = [p for p in _parts(Settings(), 3, 9001, 5433) if p.name.startswith("node")]
    got = []
    for part in nodes:
        args = build_parser().parse_args(part.argv[3:])
        s = settings_from_args(args, COMMANDS[args.command][1])
        got.append((s.port, s.sql_port))
    assert got == [(9001, 5433), (9002, 5434), (9003, 5435)]
    assert all("--sql-port" not in p.argv for p in _parts(Settings(), 3, 9001, 0))
    up = build_parser().parse_args(["up"])
    assert (up.node_port, up.sql_port) == (9001, 5433)


def test_ups_banner_has_a_psql_line_with_the_demo_token() -> None:
    from streamiq.cli.tokens import DemoToken
    from streamiq.cli.up import _psql_lines

    demo = DemoToken("s" * 32, Path("/nonexistent/token"))
    demo.token = "the-demo-token"
    head, psql = _psql_lines(Settings(host="0.0.0.0"), demo, 3, 5433)
    assert "ports 5433-5435" in head
    assert psql == ('  psql "host=127.0.0.1 port=5433 dbname=streamiq user=demo '
                    'password=the-demo-token"')
    assert _psql_lines(Settings(), demo, 3, 0) == []
    assert "password=any" in _psql_lines(Settings(), None, 1, 5433)[1]


class _Gone:
    """up's own output once it cannot be written (``streamiq up | head`` after head left)."""

    def write(self, _: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_parts_output_is_drained_when_ups_own_cannot_be_written(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every line is read from the part (its pipe never fills, so the part never blocks
    writing a log line) and the pipeline's ready line still seen, though up's stdout
    (kept, as ``run_up`` keeps it) raises on every write."""
    monkeypatch.setattr("sys.stdout", _Gone())
    keep_output()
    part = Part("pipeline", ["x"], "here", lambda _: True)
    lines = iter([f"line {i}\n" for i in range(1000)] + ["streamiq: pipeline ready\n",
                                                        "after\n"])
    _relay(part, lines)
    assert next(lines, None) is None and part.ready_line.is_set()


def test_up_runs_on_once_whoever_reads_its_output_has_left(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``streamiq up | head``: once head has left, up's lines go nowhere and up goes on
    (its ``finally``, which stops the parts, says "stopping" first: it must not raise)."""
    gone = _Gone()
    monkeypatch.setattr("sys.stdout", gone)
    with pytest.raises(BrokenPipeError):
        say("a line before")  # what ended up, and left its parts running
    keep_output()
    keep_output()  # once: not wrapped twice
    say("stopping")
    print("the ready line", flush=True)
    out = sys.stdout
    assert getattr(out, "gone", False) is True and getattr(out, "_stream", None) is gone


class _Ascii:
    """An output that cannot encode one line (a locale's ASCII), and takes the others."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def write(self, text: str) -> int:
        text.encode("ascii")  # UnicodeEncodeError for a line it cannot take
        self.lines.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_a_line_up_cannot_encode_is_dropped_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    out = _Ascii()
    monkeypatch.setattr("sys.stdout", out)
    keep_output()
    for line in ("before\n", "caf\u00e9\n", "after\n"):
        sys.stdout.write(line)
    assert out.lines == ["before\n", "after\n"]
