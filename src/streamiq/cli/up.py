"""``streamiq up``: broker, ingest, pipeline and nodes as supervised child processes.

Children's output is relayed with a ``[part]`` prefix; each part is announced when
ready; Ctrl-C or SIGTERM stops them all (nodes first, broker last); if one dies the
rest are stopped and ``up`` exits non-zero. Preconditions (Java, free ports) are
checked first so a bad start fails with one clear line.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from streamiq.config import Settings
from streamiq.kafka.broker import BrokerError, EmbeddedBroker, port_in_use

__all__ = ["run_broker", "run_up"]


@dataclass
class Child:
    name: str
    argv: list[str]
    ready: Callable[[], bool]
    proc: subprocess.Popen[str] | None = None
    saw_ready_line: threading.Event = field(default_factory=threading.Event)


def _say(msg: str) -> None:
    print(f"streamiq: {msg}", flush=True)


def _fail(msg: str) -> None:
    print(f"streamiq: error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def _http_ok(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return httpx.get(url, timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False
    return check


def _common(s: Settings) -> list[str]:
    argv = ["--bootstrap-servers", s.bootstrap_servers, "--cluster", s.cluster,
            "--topic-prefix", s.topic_prefix,
            "--app", s.app, "--partitions", str(s.partitions), "--log-level", s.log_level]
    if s.views_module:
        argv += ["--views-module", s.views_module]
    if s.kafka_config:
        import json
        argv += ["--kafka-config", json.dumps(s.kafka_config)]
    return argv


def _children(s: Settings, nodes: int, node_port: int) -> list[Child]:
    py = [sys.executable, "-m", "streamiq"]
    out = [Child("ingest", [*py, "ingest", *_common(s), "--ingest-host", s.ingest_host,
                            "--ingest-port", str(s.ingest_port)],
                 _http_ok(f"http://{s.ingest_host}:{s.ingest_port}/health"))]
    pipe = Child("pipeline", [*py, "pipeline", *_common(s), "--master", s.master,
                              "--checkpoint-dir", str(s.checkpoint_dir),
                              "--trigger-ms", str(s.trigger_ms)], lambda: False)
    pipe.ready = pipe.saw_ready_line.is_set
    out.append(pipe)
    for i in range(nodes):
        port = node_port + i
        argv = [*py, "node", *_common(s), "--host", s.host, "--port", str(port),
                "--state-dir", str(s.state_dir), "--standby-replicas", str(s.standby_replicas),
                "--max-lag", str(s.max_lag)] + (["--redirect"] if s.redirect else [])
        out.append(Child(f"node:{port}", argv, _http_ok(f"http://{s.host}:{port}/health")))
    return out


def _check(s: Settings, nodes: int, node_port: int, embedded: bool) -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        _fail("Java was not found (PySpark needs Java 17): install it or set JAVA_HOME")
    ports = [(s.ingest_host, s.ingest_port, "--ingest-port")]
    ports += [(s.host, node_port + i, "--node-port") for i in range(nodes)]
    if embedded:
        ports.append((s.broker_host, s.broker_port, "--broker-port"))
    for host, port, flag in ports:
        if port_in_use(host, port):
            _fail(f"port {host}:{port} is already in use (choose another with {flag})")


def _relay(child: Child) -> None:
    assert child.proc is not None and child.proc.stdout is not None
    for line in child.proc.stdout:
        if "pipeline ready" in line:
            child.saw_ready_line.set()
        sys.stdout.write(f"[{child.name}] {line}")
        sys.stdout.flush()


def _stop_all(children: list[Child], broker: EmbeddedBroker | None) -> None:
    for c in reversed(children):
        if c.proc is not None and c.proc.poll() is None:
            c.proc.terminate()
    for c in reversed(children):
        if c.proc is None:
            continue
        try:
            c.proc.wait(15)
        except subprocess.TimeoutExpired:
            c.proc.kill()
            c.proc.wait()
    if broker is not None:
        broker.stop()


def run_up(settings: Settings, nodes: int = 3, node_port: int = 9001) -> None:
    embedded = "bootstrap_servers" not in settings.model_fields_set
    _check(settings, nodes, node_port, embedded)
    broker = None
    if embedded:
        broker = EmbeddedBroker(settings.broker_host, settings.broker_port)
        try:
            broker.start()
        except BrokerError as exc:
            _fail(str(exc))
        settings = settings.model_copy(update={"bootstrap_servers": broker.bootstrap_servers})
        _fresh_state(settings)
        _say(f"embedded Kafka-protocol broker ready on {broker.bootstrap_servers}")
    else:
        _say(f"using Kafka at {settings.bootstrap_servers}")
    Path(settings.state_dir).mkdir(parents=True, exist_ok=True)
    children = _children(settings, nodes, node_port)
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}
    code = 0
    try:
        for c in children:
            c.proc = subprocess.Popen(c.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env)
            threading.Thread(target=_relay, args=(c,), daemon=True).start()
        code = _supervise(children, settings, stopping)
    finally:
        _say("stopping")
        _stop_all(children, broker)
        _say("stopped")
    raise SystemExit(code)


def _supervise(children: list[Child], s: Settings, stopping: threading.Event) -> int:
    pending = {c.name for c in children}
    while not stopping.wait(0.25):
        for c in children:
            assert c.proc is not None
            if c.proc.poll() is not None:
                _say(f"{c.name} exited with code {c.proc.returncode}; stopping everything")
                return 1
            if c.name in pending and c.ready():
                pending.discard(c.name)
                _say(f"{c.name} ready ({_where(c.name, s)})")
                if not pending:
                    _say(f"all parts ready: POST http://{s.ingest_host}:{s.ingest_port}"
                         "/account/{id}?amount=N, then GET any node /account/{id}")
    return 0


def _where(name: str, s: Settings) -> str:
    if name == "ingest":
        return f"http://{s.ingest_host}:{s.ingest_port}"
    if name == "pipeline":
        return f"Spark {s.master}"
    return f"http://{s.host}:{name.partition(':')[2]}"


def _fresh_state(s: Settings) -> None:
    """The embedded broker keeps its log in memory: local state from an earlier run
    (node stores, Spark checkpoints) describes a log that no longer exists."""
    for d in (Path(s.state_dir), Path(s.checkpoint_dir)):
        if d.exists() and any(d.iterdir()):
            _say(f"embedded broker starts empty: clearing stale local state in {d}")
            shutil.rmtree(d)


def run_broker(settings: Settings) -> None:
    """Run the embedded broker in the foreground until Ctrl-C or SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        broker = EmbeddedBroker(settings.broker_host, settings.broker_port).start()
    except BrokerError as exc:
        _fail(str(exc))
    print(f"streamiq broker listening on {broker.bootstrap_servers}", flush=True)
    try:
        while not stop.wait(0.5):
            if broker.proc is None or broker.proc.poll() is not None:
                _fail("embedded broker exited")
    finally:
        broker.stop()
