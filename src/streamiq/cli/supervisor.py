"""``streamiq up``'s supervisor: restart policy, parts, and what it tells ``status``.

A part that exits is restarted after a backoff that starts at 1 s and doubles up to a
cap of 30 s (``--restart-max-s``), and starts over once the part has stayed ready 60 s: Kubernetes'
CrashLoopBackOff. There is no give-up: a part that keeps crashing is retried for as
long as ``up`` runs, one line per restart, while the other parts keep serving. Only
Ctrl-C / SIGTERM, or an embedded broker that cannot be started again
(``BROKER_TRIES``), stops everything. The parts' state (ready, restarts, last exit,
next restart) is written to a small JSON file (``up.json`` beside the state
directory) that ``streamiq status`` reads, and as metrics to ``up.prom`` beside it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from streamiq._signals import StopFlag
from streamiq.kafka.broker import BrokerError, EmbeddedBroker

__all__ = ["BROKER_TRIES", "OUT", "KeptOutput", "Part", "RestartPolicy", "Supervisor",
           "describe_exit", "keep_output", "say", "write_state"]

OUT = threading.Lock()  # one line at a time from the relay threads and the supervisor
#: exit codes a part also shows when Ctrl-C / SIGTERM reached its whole process group
_STOP_CODES = frozenset({0, -signal.SIGTERM, -signal.SIGINT, 128 + signal.SIGTERM,
                         128 + signal.SIGINT})
#: how long such an exit waits for ``up``'s own signal handler before it counts as a crash
_SETTLE_S = 1.0
#: how long a restart waits for the old process tree to let go of its output
_DRAIN_S = 20.0
#: starts of a dead embedded broker tried before everything stops
BROKER_TRIES = 3


class KeptOutput:
    """up's stdout, whoever reads it may leave (``streamiq up | head``): a write that
    fails drops that line and every later one, and up runs on (stopped as always, by
    Ctrl-C or SIGTERM, its parts with it). Before, the failed write ended up at once and
    its ``finally`` failed the same way before stopping the parts: orphans holding the
    demo's ports."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return int(self._stream.write(text))
            except UnicodeError:  # a line this output cannot encode: that line alone
                pass
            except (OSError, ValueError):  # a closed pipe, a closed file
                self.gone = True
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self.gone = True

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding...
        return getattr(self._stream, name)


def keep_output() -> None:
    """up's stdout from here on a ``KeptOutput`` (once)."""
    if not isinstance(sys.stdout, KeptOutput):
        sys.stdout = KeptOutput(sys.stdout)


def say(msg: str) -> None:
    with OUT:
        print(f"streamiq: {msg}", flush=True)


def describe_exit(returncode: int) -> str:
    """``killed by SIGKILL`` or ``code 1``."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"code {returncode}"


@dataclass
class RestartPolicy:
    """How long to wait before restarting a part that exited; never "give up".

    The first restart waits ``first_delay``, each next one twice as long up to
    ``max_delay``; a part that stayed ready ``stable_after`` seconds starts over. From
    ``loop_after`` exits in a row without staying ready that long it is crash-looping
    (reported, still restarted).
    """

    first_delay: float = 1.0
    max_delay: float = 30.0
    stable_after: float = 60.0
    loop_after: int = 3
    streak: int = 0  # exits in a row without staying ready stable_after
    _ready_at: float | None = None

    def ready(self, now: float) -> None:
        self._ready_at = now

    def exited(self, now: float) -> float:
        """Seconds to wait before the restart."""
        if self._ready_at is not None and now - self._ready_at >= self.stable_after:
            self.streak = 0
        self._ready_at = None
        doubling: int = 2 ** min(self.streak, 32)
        delay = min(self.first_delay * doubling, self.max_delay)
        self.streak += 1
        return delay

    @property
    def crash_looping(self) -> bool:
        return self.streak >= self.loop_after


@dataclass(eq=False)
class Part:
    """One supervised child: how to start it, how to tell it is ready, its state."""

    name: str
    argv: list[str]
    where: str
    probe: Callable[[Part], bool]
    policy: RestartPolicy = field(default_factory=RestartPolicy)
    proc: Any = None  # subprocess.Popen[str] while running
    relay: threading.Thread | None = None
    ready_line: threading.Event = field(default_factory=threading.Event)
    started_at: float = 0.0
    ready: bool = False
    ever_ready: bool = False
    restarts: int = 0
    exit_seen: float | None = None
    restart_at: float | None = None
    last_exit: str | None = None  # "code 1 at 21:40:11"

    def state(self, now: float) -> dict[str, Any]:
        """What ``streamiq status`` shows of this part."""
        wait = None if self.restart_at is None else round(max(0.0, self.restart_at - now), 1)
        return {"name": self.name, "where": self.where, "ready": self.ready,
                "restarts": self.restarts, "crash_looping": self.policy.crash_looping,
                "last_exit": self.last_exit, "restart_in_s": wait,
                "restart_at": None if wait is None else time.time() + wait}


def http_ok(url: str) -> Callable[[Part], bool]:
    """A readiness probe of ``url`` (the supervisor's thread only), with one client for
    its life: each ``httpx.get`` builds a TLS context, ~47 ms of CPU, four times a
    second per part while the parts start."""
    client = httpx.Client(timeout=0.5)

    def probe(_: Part) -> bool:
        try:
            return client.get(url).status_code == 200
        except httpx.HTTPError:
            return False
    return probe


def saw_ready_line(part: Part) -> bool:
    return part.ready_line.is_set()


def _relay(part: Part, stdout: Any) -> None:
    """The part's output to up's, a line at a time, until the part closes it; up's
    stdout is a ``KeptOutput``, so the pipe is drained whatever becomes of up's own
    output (a full pipe would stop the part at its next line)."""
    for line in stdout:
        if "pipeline ready" in line:
            part.ready_line.set()
        with OUT:
            sys.stdout.write(f"[{part.name}] {line}")
            sys.stdout.flush()


def _spawn(part: Part, env: dict[str, str]) -> None:
    part.proc = subprocess.Popen(part.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, encoding="utf-8", errors="replace", env=env)
    part.relay = threading.Thread(target=_relay, args=(part, part.proc.stdout),
                                  name=f"relay-{part.name}", daemon=True)
    part.relay.start()


_FAMILIES = (("streamiq_up_part_restarts_total", "counter", "Restarts of the part by up.",
              "restarts"),
             ("streamiq_up_part_crash_looping", "gauge",
              "1 while the part exits again and again without staying ready.", "crash_looping"),
             ("streamiq_up_part_ready", "gauge", "1 while the part is ready.", "ready"))


def prometheus_text(states: list[dict[str, Any]]) -> str:
    """The parts' restarts, crash loops and readiness in Prometheus' text format (for
    node_exporter's textfile collector: up serves no endpoint of its own)."""
    lines = []
    for name, kind, help_, key in _FAMILIES:
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        lines += [f'{name}{{part="{p["name"]}"}} {int(p[key])}' for p in states]
    return "\n".join(lines) + "\n"


def write_state(path: Path, parts: list[Part], now: float) -> None:
    """``up.json`` (up's PID and every part's state) and ``up.prom`` (the same as
    metrics) beside it, each replaced atomically: a reader never sees half a file."""
    states = [p.state(now) for p in parts]
    doc = {"pid": os.getpid(), "updated": time.time(), "parts": states}
    for where, text in ((path, json.dumps(doc, indent=1) + "\n"),
                        (path.with_suffix(".prom"), prometheus_text(states))):
        tmp = where.with_name(where.name + ".tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, where)
        except OSError as exc:  # status shows less; the parts keep running
            say(f"could not write {where}: {exc}")


class Supervisor:
    """Starts the parts, restarts the ones that exit, stops them all.

    ``step`` is one pass over the parts (the run loop calls it every 0.25 s); it
    answers an exit code when everything must stop (only a broker that cannot be
    restarted). ``announce`` prints the lines once every part has been ready;
    ``changed`` sees the parts whenever one starts, exits or turns ready. ``spawn`` and
    ``clock`` are replaceable so the rules can be tested without processes.
    """

    def __init__(self, parts: list[Part], broker: EmbeddedBroker | None = None,
                 announce: Callable[[], list[str]] = lambda: ["streamiq: all parts ready"],
                 spawn: Callable[[Part], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 changed: Callable[[list[Part], float], None] | None = None) -> None:
        self.parts = parts
        self.broker = broker
        self.announce = announce
        self.clock = clock
        self.changed = changed or (lambda parts, now: None)
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}
        self._spawn = spawn or (lambda part: _spawn(part, env))
        self.announced = False

    def start(self, part: Part) -> None:
        part.ready_line.clear()
        part.ready = False
        part.exit_seen = part.restart_at = None
        part.started_at = self.clock()
        self._spawn(part)
        self.changed(self.parts, part.started_at)

    def start_all(self) -> None:
        for part in self.parts:
            self.start(part)

    def step(self) -> int | None:
        now = self.clock()
        if self.broker is not None and self.broker.proc is not None:
            rc = self.broker.proc.poll()
            if rc is not None and not self._restart_broker(rc):
                return 1
        for part in self.parts:
            if part.proc is None:
                if part.restart_at is not None and now >= part.restart_at and self._drained(
                        part, now):
                    self.start(part)
                continue
            rc = part.proc.poll()
            if rc is not None:
                self._exited(part, rc, now)
            elif not part.ready and part.probe(part):
                self._ready(part, now)
        return None

    def _restart_broker(self, rc: int) -> bool:
        """Start the embedded broker again on its log (the other parts reconnect by
        themselves); False when it cannot be started after a few tries."""
        assert self.broker is not None
        say(f"the embedded broker exited at {_clock()} ({describe_exit(rc)}); restarting it "
            "on its log")
        for attempt in range(1, BROKER_TRIES + 1):
            try:
                self.broker.start()
            except BrokerError as exc:
                say(f"the embedded broker did not start (try {attempt} of {BROKER_TRIES}): "
                    f"{exc}")
                continue
            say(f"embedded broker ready again on {self.broker.bootstrap_servers}")
            return True
        say("the embedded broker cannot be restarted: stopping everything")
        return False

    def _exited(self, part: Part, rc: int, now: float) -> None:
        """Schedule the part's restart, with the policy's backoff."""
        if part.exit_seen is None:
            part.exit_seen = now
        if rc in _STOP_CODES and now - part.exit_seen < _SETTLE_S:
            return  # maybe Ctrl-C / SIGTERM to the group: let up's handler run first
        up_s = part.exit_seen - part.started_at
        part.last_exit = f"{describe_exit(rc)} at {_clock()}"
        why = f"{part.name} exited at {_clock()} ({describe_exit(rc)}, up {up_s:.0f} s)"
        delay = part.policy.exited(now)
        part.restarts += 1
        looping = ""
        if part.policy.crash_looping:
            looping = (f", crash-looping: {part.policy.streak} exits without staying ready "
                       f"{part.policy.stable_after:g} s; the other parts keep serving")
        say(f"{why}; restarting in {delay:g} s (restart {part.restarts}{looping})")
        part.proc, part.ready = None, False
        part.restart_at = now + delay
        self.changed(self.parts, now)

    def _drained(self, part: Part, now: float) -> bool:
        """The old process and whatever it started (Spark's JVM) let go of the output:
        a new pipeline never runs beside the remains of the old one on one checkpoint."""
        if part.relay is None or not part.relay.is_alive():
            return True
        assert part.restart_at is not None
        if now - part.restart_at < _DRAIN_S:
            return False
        say(f"{part.name}: its old processes still hold its output after {_DRAIN_S:g} s; "
            "restarting anyway")
        return True

    def _ready(self, part: Part, now: float) -> None:
        part.ready = True
        part.policy.ready(now)
        if part.ever_ready:
            say(f"{part.name} ready again ({part.where}) after restart {part.restarts}")
        else:
            part.ever_ready = True
            say(f"{part.name} ready ({part.where})")
        if not self.announced and all(p.ever_ready for p in self.parts):
            self.announced = True
            lines = self.announce()
            with OUT:  # in one write: whoever reads "all parts ready" sees the rest too
                print("\n".join(lines), flush=True)
        self.changed(self.parts, now)

    def run(self, stopping: StopFlag | threading.Event,
            tick: Callable[[list[Part]], None] | None = None) -> int:
        """Start every part, then step until told to stop; ``tick`` sees the parts
        after each step (the ready bar)."""
        self.start_all()
        while not stopping.wait(0.25):
            code = self.step()
            if code is not None:
                return code
            if tick is not None:
                tick(self.parts)
        return 0

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM to every part, nodes first (reverse start order); whatever has not
        exited ``timeout`` seconds later is killed; the broker last. No restarts."""
        running = [p for p in reversed(self.parts) if p.proc is not None]
        for p in running:
            if p.proc.poll() is None:
                p.proc.terminate()
        deadline = time.monotonic() + timeout
        for p in running:
            try:
                p.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say(f"{p.name} did not stop within {timeout:g} s: killing it")
                p.proc.kill()
                p.proc.wait()
        for p in self.parts:
            if p.relay is not None:
                p.relay.join(2)  # its last lines come before "stopped"
        if self.broker is not None:
            self.broker.stop()


def _clock() -> str:
    return time.strftime("%H:%M:%S")
