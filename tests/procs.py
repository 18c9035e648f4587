"""Real processes for integration tests: nodes, ingest and pipeline, stopped by PID."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import httpx
from spark_cds import ARCHIVE, BASE_JVM, USE_ARCHIVE

from streamiq.auth import mint

__all__ = ["FAST_ENV", "FAST_JVM", "HTTP", "SHORT_BATCHES", "Deployment", "Proc", "favoured",
           "free_port", "free_ports", "port_free", "wait_http"]

#: the tests' Spark driver JVMs: C1 only and a serial GC, for short lives (a pipeline's
#: JVM up in ~2.5 s instead of ~6.5 s, its first job ~4 s sooner, measured on 2 cores);
#: with the class-data archive ``make test`` makes (tests/spark_cds.py) when it is there
FAST_JVM = BASE_JVM + (f" {USE_ARCHIVE}" if ARCHIVE.is_file() else "")
#: what every pipeline and broker a test starts reads from its environment
#: (tests/conftest.py sets it): the fast JVM, and no warm-up (ready ~20-40 s sooner; the
#: first batch pays a little more; test_up's ``streamiq up`` keeps the warm-up: the
#: demo's path); brokers on C1 only, appended as Kafka's scripts do (``KAFKA_OPTS``): a
#: broker's start, a little traffic and 20 s idle 5.4-6.1 -> 3.1-3.2 s of JVM CPU.
#: Real-time batches keep the product's 300 s: a pipeline ending a batch every 10 s
#: burned 43-48% of a core at rest (the JIT recompiling per batch, task launches) against
#: 18%, and the suite runs three at once. Tests that need a batch's end (a windowed
#: view's position wait, the batch metrics) pass ``SHORT_BATCHES`` to their pipeline.
FAST_ENV = {
    "STREAMIQ_SPARK_CONFIG": json.dumps({"spark.driver.extraJavaOptions": FAST_JVM}),
    "STREAMIQ_WARMUP": "false",
    "KAFKA_OPTS": "-XX:TieredStopAtLevel=1",
}
#: a pipeline's arguments for real-time batches of 10 s (markers, batch metrics)
SHORT_BATCHES = ["--realtime-batch-s", "10"]


#: one client for the tests' plain HTTP calls (``HTTP.get(url, ...)``): ``httpx.get``
#: makes a client per call, and its TLS context costs ~47 ms of CPU each time (measured
#: on 2 cores). No keep-alive: each request opens its own connection, as ``httpx.get``'s
#: did, so a part killed or restarted between two calls is met afresh
HTTP = httpx.Client(timeout=5.0, limits=httpx.Limits(max_keepalive_connections=0))


#: where tests take their ports: below the kernel's ephemeral range (32768-60999 here),
#: so no port the kernel hands out by itself (a Spark driver's, a client's outgoing
#: connection, a TCP self-connect) can take one between its pick and its bind; and above
#: the defaults users run on (8080, 9001-9003, 9092, 9400, 5433-5435)
PORTS = range(20000, 32768)


def _worker_slice() -> range:
    """This pytest-xdist worker's share of PORTS: workers never pick the same port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), index + 1)
    size = len(PORTS) // count
    return range(PORTS.start + index * size, PORTS.start + (index + 1) * size)


_SLICE = _worker_slice()
_next = _SLICE.start + (os.getpid() * 7919) % len(_SLICE)  # runs apart: distinct starts


def port_free(port: int) -> bool:
    """Nothing holds ``port`` on any local IPv4 address (bound, listening or connected:
    the wildcard bind fails on a port bound on any one address, such as a test host's)."""
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_ports(n: int = 1) -> int:
    """The first of ``n`` consecutive free loopback ports from this worker's slice, each
    handed out once per run (until the slice wraps). Tests never use the default ports."""
    global _next
    for _ in range(len(_SLICE)):
        first = _next
        _next = first + n if first + n < _SLICE.stop else _SLICE.start
        if first + n <= _SLICE.stop and all(port_free(p) for p in range(first, first + n)):
            return first
    raise RuntimeError(f"no {n} consecutive free ports in {_SLICE}")


def free_port() -> int:
    """A free loopback TCP port (see free_ports)."""
    return free_ports(1)


def wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes] | None = None,
              verify: bool | str = True) -> bool:
    """Poll ``url`` until it answers 200. One client for the whole wait: ``httpx.get``
    makes a client per call, and its TLS context costs ~47 ms of CPU each time (about a
    third of a core while a part starts, polled every 0.1 s; measured on 2 cores)."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=1.0, verify=verify) as client:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                return False
            try:
                if client.get(url).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    return False


#: the niceness ``favoured`` gives: ahead of the other workers' Spark JVMs and brokers
FAVOURED_NICE = -10


def _threads(pid: int) -> list[int]:
    with suppress(OSError):
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    return []


@contextmanager
def favoured(pids: list[int]) -> Iterator[None]:
    """Schedule every thread of ``pids``, and the calling thread (a test's load client),
    ahead of the rest of the machine while a test bounds their latency.

    ``make test`` runs several test files at once on 2 cores; a Spark JVM's dozens of
    busy threads in another worker can keep a node or the client off the CPU for a
    second, which is what such a bound would then measure. A node on a machine of its
    own does not wait for them; niceness gives the measured processes that machine (it
    needs root, as the scale-out tests do; without it nothing changes). Threads a
    process starts later inherit their creator's niceness."""
    before = os.getpriority(os.PRIO_PROCESS, 0)  # 0: the calling thread
    for tid in [0, *(t for pid in pids for t in _threads(pid))]:
        with suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, FAVOURED_NICE)
    try:
        yield
    finally:
        with suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, 0, before)


class Proc:
    """``python -m streamiq <command> <args>`` with its output in a log file."""

    def __init__(self, command: str, args: list[str], log_dir: Path, name: str,
                 prefix: list[str] | None = None) -> None:
        self.command = command
        self.args = args
        self.name = name
        self.prefix = prefix or []  # e.g. ip netns exec NS: run on another test host
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = 0  # the log's size when this process started

    def start(self) -> Proc:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.started_at = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [*self.prefix, sys.executable, "-m", "streamiq", self.command, *self.args],
            stdout=log, stderr=subprocess.STDOUT, env=env)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, url: str, timeout: float = 60, verify: bool | str = True) -> None:
        if not wait_http(url, timeout, self.proc, verify):
            raise AssertionError(f"{self.name} not ready at {url}; log:\n{self.log()[-4000:]}")

    def wait_line(self, text: str, timeout: float = 120) -> None:
        """``text`` printed by this process (a part started again on the same log file
        appends to it: an earlier run's line does not count)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.output():
                return
            if not self.alive():
                break
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: no {text!r}; log:\n{self.log()[-4000:]}")

    def log(self) -> str:
        """Everything in the log file (every run of a part with this name)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def output(self) -> str:
        """What this process printed since its start."""
        if not self.log_path.exists():
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(self.started_at)
            return f.read().decode(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no goodbye heartbeat, no flush."""
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 20) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Deployment:
    """Ingest, pipeline and nodes sharing one cluster name and topic prefix."""

    def __init__(self, bootstrap: str, root: Path, procs: Callable[..., Proc],
                 free_port: Callable[[], int]) -> None:
        self.bootstrap = bootstrap
        self.name = f"c{uuid.uuid4().hex[:6]}"
        self.prefix = f"{self.name}-"
        self.root = root
        self._procs = procs
        self._free_port = free_port
        self.ports: list[int] = []
        self.secret = uuid.uuid4().hex  # the nodes' --cluster-secret: heartbeats signed
        # client authentication: off unless a test turns it on (then every request to a
        # node or the ingest needs ``self.headers``); hops are authenticated either way
        self.auth = False
        self.jwt_secret = uuid.uuid4().hex
        self.token = mint(self.jwt_secret, subject="tests")
        self.headers = {"authorization": f"Bearer {self.token}"}

    def auth_flags(self) -> list[str]:
        return ["--auth", "--jwt-secret", self.jwt_secret] if self.auth else ["--no-auth"]

    def common(self, app: str | None) -> list[str]:
        """Flags every part shares; ``app=None``: no --app (a node serves the catalog's
        views only)."""
        return ["--bootstrap-servers", self.bootstrap, "--cluster", self.name,
                "--topic-prefix", self.prefix, *(["--app", app] if app else []),
                "--log-level", "info"]

    def topic(self, name: str) -> str:
        return self.prefix + name

    def node(self, app: str | None = "bank", port: int | None = None,
             extra: list[str] | None = None,
             wait: bool = True, prefix: list[str] | None = None) -> tuple[int, Proc]:
        """``prefix``: before the command line (a launcher such as tests/faultnode.py)."""
        port = port or self._free_port()
        args = [*self.common(app), "--port", str(port), "--state-dir",
                str(self.root / "state"), "--cluster-secret", self.secret, *self.auth_flags(),
                *(extra or [])]
        p = self._procs("node", args, name=f"node-{port}", prefix=prefix)
        if wait:
            p.wait_ready(f"http://127.0.0.1:{port}/health", 60)
        if port not in self.ports:
            self.ports.append(port)
        return port, p

    def nodes(self, n: int = 3, app: str | None = "bank", extra: list[str] | None = None,
              ca: str | None = None) -> list[tuple[int, Proc]]:
        """``n`` nodes, ready; ``ca``: they serve HTTPS, verified with this CA file."""
        out = [self.node(app, extra=extra, wait=False) for _ in range(n)]
        for port, p in out:
            scheme = "https" if ca else "http"
            p.wait_ready(f"{scheme}://127.0.0.1:{port}/health", 60, verify=ca or True)
        return out

    def settle(self, ports: list[int], view: str, timeout: float = 60,
               ca: str | None = None) -> None:
        """Wait until every node's /v1/cluster shows each partition of ``view`` served by
        its assigned owner as active (a node that joins last takes some over, and a
        query in between may find the old owner gone and the new one not restored)."""
        scheme = "https" if ca else "http"
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=10, verify=ca or True, headers=self.headers) as c:
            for port in ports:
                while True:
                    meta = c.get(f"{scheme}://127.0.0.1:{port}/v1/cluster").json()
                    parts = meta["views"][view].values()
                    if len(meta["nodes"]) == len(ports) and all(
                            pv["replicas"] and pv["replicas"][0]["role"] == "active"
                            and pv["replicas"][0]["address"] == pv["assigned"][0]
                            for pv in parts):
                        break
                    assert time.monotonic() < deadline, f"{view} never settled: {meta}"
                    time.sleep(0.2)

    def ingest(self, app: str = "bank", extra: list[str] | None = None) -> tuple[int, Proc]:
        port = self._free_port()
        p = self._procs("ingest", [*self.common(app), "--ingest-port", str(port),
                                   *self.auth_flags(), *(extra or [])],
                        name=f"ingest-{port}")
        p.wait_ready(f"http://127.0.0.1:{port}/health", 60)
        return port, p

    def pipeline(self, app: str = "bank", extra: list[str] | None = None,
                 wait: bool = True) -> Proc:
        """``wait=False``: started, not waited for (start the other parts meanwhile, then
        :meth:`pipeline_ready`): a Spark start overlaps the nodes' own."""
        self.pipeline_metrics = self._free_port()  # its /metrics (never the default 9400)
        p = self._procs("pipeline", [*self.common(app),
                                     "--checkpoint-dir", str(self.root / "checkpoints"),
                                     "--metrics-port", str(self.pipeline_metrics),
                                     *(extra or [])], name="pipeline")
        if wait:
            self.pipeline_ready(p)
        return p

    @staticmethod
    def pipeline_ready(p: Proc) -> None:
        # a pipeline of two views started in over 180 s in a CI run (load 16 on 2 cores)
        p.wait_line("pipeline ready", 360)
