"""``streamiq up``: broker, ingest, pipeline and nodes as supervised child processes.

Children's output is relayed with a ``[part]`` prefix and each part is announced when
ready. A part that exits or is killed is restarted with backoff (0.5 s doubling to 8 s,
back to 0.5 s once it has stayed ready for 30 s) while the others keep running; one
line says why and when, another when it is ready again. A restarted part resumes from
its own checkpoint (a node from its RocksDB stores, the pipeline from its Spark
checkpoints). A part that crash-loops (5 restarts within 60 s, or 5 in a row without
staying ready) stops everything; ``up`` then exits 1. The embedded broker (Apache Kafka,
its log on disk under ``--broker-dir``) is started first and restarted on its log when it
dies; the other parts reconnect to it by themselves, and only a broker that cannot be
started again stops everything. Nothing is wiped at start: a second ``up`` resumes every
view, store and checkpoint (``--fresh`` starts from a clean slate). Ctrl-C or SIGTERM,
sent to ``up`` alone or to its whole process group, stops every part (nodes first,
broker last; a part still running 30 s later is killed) and ``up`` exits 0.
Preconditions (Java, the broker's jars, free ports, the app) are checked first so a bad
start fails with one clear line.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import SecretStr

from streamiq._signals import StopFlag, stop_on_signals
from streamiq.auth import mint
from streamiq.cli.readybar import ReadyBar
from streamiq.config import WILDCARD_HOSTS, Settings, token_file
from streamiq.kafka.broker import BrokerError, EmbeddedBroker, port_in_use

__all__ = ["Part", "RestartPolicy", "Supervisor", "describe_exit", "run_broker", "run_up"]

_OUT = threading.Lock()  # one line at a time from the relay threads and the supervisor
#: exit codes a part also shows when Ctrl-C / SIGTERM reached its whole process group
_STOP_CODES = frozenset({0, -signal.SIGTERM, -signal.SIGINT, 128 + signal.SIGTERM,
                         128 + signal.SIGINT})
#: how long such an exit waits for ``up``'s own signal handler before it counts as a crash
_SETTLE_S = 1.0
#: how long a restart waits for the old process tree to let go of its output
_DRAIN_S = 20.0
#: starts of a dead embedded broker tried before everything stops
BROKER_TRIES = 3


def _say(msg: str) -> None:
    with _OUT:
        print(f"streamiq: {msg}", flush=True)


def _fail(msg: str) -> None:
    print(f"streamiq: error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(2)


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
    """When to restart a part that exited, and when to give up on it.

    The first restart waits ``first_delay``, each next one twice as long up to
    ``max_delay``; a part that stayed ready ``stable_after`` seconds starts over. It is
    crash-looping (``exited`` answers None) when it already had ``max_restarts``
    restarts within ``window`` seconds, or ``max_restarts`` in a row without staying
    ready that long (a part slower to start than ``window`` / ``max_restarts``).
    """

    first_delay: float = 0.5
    max_delay: float = 8.0
    stable_after: float = 30.0
    max_restarts: int = 5
    window: float = 60.0
    _recent: deque[float] = field(default_factory=deque, repr=False)
    _streak: int = 0
    _ready_at: float | None = None

    def ready(self, now: float) -> None:
        self._ready_at = now

    def exited(self, now: float) -> float | None:
        """Seconds to wait before the restart, or None: crash loop, give up."""
        if self._ready_at is not None and now - self._ready_at >= self.stable_after:
            self._streak = 0
        self._ready_at = None
        while self._recent and now - self._recent[0] >= self.window:
            self._recent.popleft()
        if len(self._recent) >= self.max_restarts or self._streak >= self.max_restarts:
            return None
        delay = min(self.first_delay * 2 ** self._streak, self.max_delay)
        self._streak += 1
        self._recent.append(now)
        return delay

    def gave_up_because(self) -> str:
        if len(self._recent) >= self.max_restarts:
            return f"{len(self._recent)} restarts within {self.window:g} s"
        return (f"{self._streak} restarts in a row without staying ready "
                f"{self.stable_after:g} s")


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


def _http_ok(url: str) -> Callable[[Part], bool]:
    def probe(_: Part) -> bool:
        try:
            return httpx.get(url, timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False
    return probe


def _saw_ready_line(part: Part) -> bool:
    return part.ready_line.is_set()


def _relay(part: Part, stdout: Any) -> None:
    for line in stdout:
        if "pipeline ready" in line:
            part.ready_line.set()
        with _OUT:
            sys.stdout.write(f"[{part.name}] {line}")
            sys.stdout.flush()


def _spawn(part: Part, env: dict[str, str]) -> None:
    part.proc = subprocess.Popen(part.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, encoding="utf-8", errors="replace", env=env)
    part.relay = threading.Thread(target=_relay, args=(part, part.proc.stdout),
                                  name=f"relay-{part.name}", daemon=True)
    part.relay.start()


class Supervisor:
    """Starts the parts, restarts the ones that exit, stops them all.

    ``step`` is one pass over the parts (the run loop calls it every 0.25 s); it
    answers an exit code when everything must stop. ``spawn`` and ``clock`` are
    replaceable so the rules can be tested without processes.
    """

    def __init__(self, parts: list[Part], broker: EmbeddedBroker | None = None,
                 all_ready: str = "all parts ready",
                 spawn: Callable[[Part], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.parts = parts
        self.broker = broker
        self.all_ready = all_ready
        self.clock = clock
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}
        self._spawn = spawn or (lambda part: _spawn(part, env))
        self._announced = False

    def start(self, part: Part) -> None:
        part.ready_line.clear()
        part.ready = False
        part.exit_seen = part.restart_at = None
        part.started_at = self.clock()
        self._spawn(part)

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
                if self._exited(part, rc, now):
                    return 1
            elif not part.ready and part.probe(part):
                self._ready(part, now)
        return None

    def _restart_broker(self, rc: int) -> bool:
        """Start the embedded broker again on its log (the other parts reconnect by
        themselves); False when it cannot be started after a few tries."""
        assert self.broker is not None
        _say(f"the embedded broker exited at {_clock()} ({describe_exit(rc)}); restarting it "
             "on its log")
        for attempt in range(1, BROKER_TRIES + 1):
            try:
                self.broker.start()
            except BrokerError as exc:
                _say(f"the embedded broker did not start (try {attempt} of {BROKER_TRIES}): "
                     f"{exc}")
                continue
            _say(f"embedded broker ready again on {self.broker.bootstrap_servers}")
            return True
        _say("the embedded broker cannot be restarted: stopping everything")
        return False

    def _exited(self, part: Part, rc: int, now: float) -> bool:
        """Schedule the part's restart; True when it is crash-looping."""
        if part.exit_seen is None:
            part.exit_seen = now
        if rc in _STOP_CODES and now - part.exit_seen < _SETTLE_S:
            return False  # maybe Ctrl-C / SIGTERM to the group: let up's handler run first
        up_s = part.exit_seen - part.started_at
        why = f"{part.name} exited at {_clock()} ({describe_exit(rc)}, up {up_s:.0f} s)"
        delay = part.policy.exited(now)
        if delay is None:
            _say(f"{why}: it is crash-looping ({part.policy.gave_up_because()}); "
                 "stopping everything")
            return True
        part.restarts += 1
        _say(f"{why}; restarting in {delay:g} s (restart {part.restarts})")
        part.proc, part.ready = None, False
        part.restart_at = now + delay
        return False

    def _drained(self, part: Part, now: float) -> bool:
        """The old process and whatever it started (Spark's JVM) let go of the output:
        a new pipeline never runs beside the remains of the old one on one checkpoint."""
        if part.relay is None or not part.relay.is_alive():
            return True
        assert part.restart_at is not None
        if now - part.restart_at < _DRAIN_S:
            return False
        _say(f"{part.name}: its old processes still hold its output after {_DRAIN_S:g} s; "
             "restarting anyway")
        return True

    def _ready(self, part: Part, now: float) -> None:
        part.ready = True
        part.policy.ready(now)
        if part.ever_ready:
            _say(f"{part.name} ready again ({part.where}) after restart {part.restarts}")
        else:
            part.ever_ready = True
            _say(f"{part.name} ready ({part.where})")
        if not self._announced and all(p.ever_ready for p in self.parts):
            self._announced = True
            _say(self.all_ready)

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
                _say(f"{p.name} did not stop within {timeout:g} s: killing it")
                p.proc.kill()
                p.proc.wait()
        for p in self.parts:
            if p.relay is not None:
                p.relay.join(2)  # its last lines come before "stopped"
        if self.broker is not None:
            self.broker.stop()


def _clock() -> str:
    return time.strftime("%H:%M:%S")


def _common(s: Settings) -> list[str]:
    argv = ["--bootstrap-servers", s.bootstrap_servers, "--cluster", s.cluster,
            "--topic-prefix", s.topic_prefix,
            "--app", s.app, "--partitions", str(s.partitions), "--log-level", s.log_level,
            "--log-format", _log_format(s)] + ([] if s.metrics else ["--no-metrics"])
    if s.views_module:
        argv += ["--views-module", s.views_module]
    if s.kafka_config:
        import json
        argv += ["--kafka-config", json.dumps(s.kafka_config)]
    return argv


def _log_format(s: Settings) -> str:
    """The children's stderr is a pipe to up, relayed to up's stdout: they log as that
    is read (text on a terminal, JSON lines otherwise), unless told."""
    if s.log_format != "auto":
        return s.log_format
    return "text" if sys.stdout.isatty() else "json"


def _parts(s: Settings, nodes: int, node_port: int) -> list[Part]:
    py = [sys.executable, "-m", "streamiq"]
    ingest = f"http://{s.ingest_host}:{s.ingest_port}"
    out = [Part("ingest", [*py, "ingest", *_common(s), "--ingest-host", s.ingest_host,
                           "--ingest-port", str(s.ingest_port)],
                ingest, _http_ok(f"{ingest}/health")),
           Part("pipeline", [*py, "pipeline", *_common(s), "--master", s.master,
                             "--checkpoint-dir", str(s.checkpoint_dir),
                             "--trigger-ms", str(s.trigger_ms),
                             "--metrics-host", s.metrics_host,
                             "--metrics-port", str(s.metrics_port)],
                f"Spark {s.master}", _saw_ready_line)]
    for i in range(nodes):
        port = node_port + i
        # one machine: a node bound to every interface is reached on loopback
        reach = "127.0.0.1" if s.host in WILDCARD_HOSTS else s.host
        url = f"http://{reach}:{port}"
        argv = [*py, "node", *_common(s), "--host", s.host, "--port", str(port),
                "--advertised", f"{reach}:{port}",
                "--state-dir", str(s.state_dir), "--standby-replicas", str(s.standby_replicas),
                "--max-lag", str(s.max_lag)] + (["--redirect"] if s.redirect else [])
        out.append(Part(f"node:{port}", argv, url, _http_ok(f"{url}/health")))
    return out


def _all_ready_line(s: Settings, topics: tuple[str, ...], nodes: int, node_port: int) -> str:
    from streamiq.views import bank, orders

    ingest = f"http://{s.ingest_host}:{s.ingest_port}"
    posts = ([f"{ingest}/account/{{id}}?amount=N"] if bank.TOPIC in topics else []) + \
            ([f"{ingest}/orders"] if orders.TOPIC in topics else [])
    first = f"POST {' or '.join(posts)}" if posts else f"ingest at {ingest}"
    last = node_port + nodes - 1
    ports = f"{node_port}-{last}" if nodes > 1 else str(node_port)
    return (f"all parts ready: {first}, then GET any node ({s.host}:{ports}); "
            f"queries at http://{s.host}:{node_port}/docs")


def _check(s: Settings, nodes: int, node_port: int, embedded: bool) -> tuple[str, ...]:
    """Fail with one line unless Java, the app and every port are there; the app's topics."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        _fail("Java was not found (PySpark needs Java 17): install it or set JAVA_HOME")
    from streamiq.views.base import load_app

    try:
        topics = load_app(s.app, s.views_module).topics
    except (ImportError, ValueError) as exc:
        _fail(f"--app/--views-module: {exc}")
    ports = [(s.ingest_host, s.ingest_port, "--ingest-port")]
    ports += [(s.host, node_port + i, "--node-port") for i in range(nodes)]
    if embedded:
        ports.append((s.broker_host, s.broker_port, "--broker-port"))
    for host, port, flag in ports:
        if port_in_use(host, port):
            _fail(f"port {host}:{port} is already in use (choose another with {flag})")
    return topics


def run_up(settings: Settings, nodes: int = 3, node_port: int = 9001,
           fresh: bool = False) -> None:
    embedded = "bootstrap_servers" not in settings.model_fields_set
    topics = _check(settings, nodes, node_port, embedded)
    if fresh:
        _clean_slate(settings, embedded)
    # Before any child exists: Ctrl-C from here on stops cleanly, never a traceback.
    stopping = stop_on_signals()
    broker = None
    if embedded:
        broker = _embedded_broker(settings)
        try:
            broker.start()
        except BrokerError as exc:
            _fail(str(exc))
        settings = settings.model_copy(update={"bootstrap_servers": broker.bootstrap_servers})
        _say(f"embedded Apache Kafka broker ready on {broker.bootstrap_servers} "
             f"(log in {settings.broker_dir})")
        if broker.formatted:
            _stale_state(settings)
    else:
        _say(f"using Kafka at {settings.bootstrap_servers}")
    Path(settings.state_dir).mkdir(parents=True, exist_ok=True)
    _share_secrets(settings)
    sup = Supervisor(_parts(settings, nodes, node_port), broker,
                     _all_ready_line(settings, topics, nodes, node_port))
    code = 0
    try:
        if not stopping.is_set():
            with ReadyBar(sup.parts, _OUT) as bar:
                code = sup.run(stopping, tick=bar.tick)
    finally:
        _say("stopping")
        sup.stop()
        _say("stopped")
    raise SystemExit(code)


def _share_secrets(s: Settings) -> None:
    """The nodes sign their heartbeats and hops with one cluster secret, and check client
    tokens with one JWT secret: the ones given, or new ones per run. Handed down in the
    environment (never on a command line, where ps shows it). Prints a demo token."""
    def given_or_new(secret: SecretStr | None) -> str:
        return secret.get_secret_value() if secret is not None else secrets.token_urlsafe(32)

    os.environ["STREAMIQ_CLUSTER_SECRET"] = given_or_new(s.cluster_secret)
    os.environ["STREAMIQ_AUTH"] = "true" if s.auth else "false"
    if not s.auth:
        _say("authentication is off (--no-auth): anyone who reaches a node reads every view")
        return
    jwt_secret = given_or_new(s.jwt_secret)
    os.environ["STREAMIQ_JWT_SECRET"] = jwt_secret
    if s.api_keys:
        os.environ["STREAMIQ_API_KEYS"] = json.dumps(s.api_keys)
    token = mint(jwt_secret, subject="demo", scope="views:* ingest")
    where = token_file(s)
    where.parent.mkdir(parents=True, exist_ok=True)
    where.touch(mode=0o600)
    where.write_text(token + "\n")
    _say(f"demo token (reads every view, writes through ingest; saved in {where}, where "
         f"streamiq status/query/load find it):")
    with _OUT:
        print(f"  export STREAMIQ_TOKEN={token}", flush=True)


def _embedded_broker(s: Settings) -> EmbeddedBroker:
    return EmbeddedBroker(s.broker_host, s.broker_port, s.broker_dir, heap_mb=s.broker_heap_mb)


def _stale_state(s: Settings) -> None:
    """The broker's log was just made: node stores and Spark checkpoints left in the
    folders describe another log (one removed by hand, or an earlier version's), whose
    offsets would be taken for this one's."""
    for d in (Path(s.state_dir), Path(s.checkpoint_dir)):
        if d.exists() and any(d.iterdir()):
            _say(f"the broker's log is new: removing {d}, state of an earlier log")
            shutil.rmtree(d)


def _clean_slate(s: Settings, embedded: bool) -> None:
    """``--fresh``: the broker's log, node stores and checkpoints go. Only with the
    embedded broker: beside an external Kafka's topics, fresh checkpoints would read
    every input again into changelogs that already hold it."""
    if not embedded:
        _fail("--fresh removes the embedded broker's log with the local state; with "
              "--bootstrap-servers, delete the topics and the local state yourself")
    for d in (Path(s.broker_dir), Path(s.state_dir), Path(s.checkpoint_dir)):
        if d.exists():
            _say(f"--fresh: removing {d}")
            shutil.rmtree(d)


def run_broker(settings: Settings, install: bool = False) -> None:
    """Run the embedded broker in the foreground until Ctrl-C or SIGTERM (``install``:
    resolve its jars and exit)."""
    if install:
        from streamiq.kafka.jars import JarsError, install_jars

        try:
            print(f"streamiq: Apache Kafka's jars are in {install_jars()}", flush=True)
        except JarsError as exc:
            _fail(str(exc))
        return
    stop = stop_on_signals()
    try:
        broker = _embedded_broker(settings).start()
    except BrokerError as exc:
        _fail(str(exc))
    print(f"streamiq broker listening on {broker.bootstrap_servers} "
          f"(log in {settings.broker_dir})", flush=True)
    try:
        while not stop.wait(0.5):
            if broker.proc is None or broker.proc.poll() is not None:
                _fail("embedded broker exited")
    finally:
        broker.stop()
