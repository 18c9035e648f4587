"""Shared bench plumbing: an embedded broker, node processes, percentiles."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import httpx

from streamiq.kafka.broker import EmbeddedBroker

__all__ = ["NodeProc", "bench_broker", "free_port", "pct", "stop_all", "wait_ready"]

# Every bench but bench_auth.py measures with client authentication off (nodes, ingest
# and 'streamiq up' read this); bench_auth.py puts on vs off side by side.
os.environ.setdefault("STREAMIQ_AUTH", "false")


_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free loopback port, never one this run handed out before: the kernel may give
    a just-closed port again, and two nodes started side by side then bound the same one
    (a node binds with SO_REUSEADDR and listens only once it has opened)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def bench_broker() -> EmbeddedBroker:
    """An Apache Kafka broker (not started) on a free port, its log in a temporary folder
    removed at exit."""
    data = tempfile.mkdtemp(prefix="streamiq-bench-kafka-")
    atexit.register(shutil.rmtree, data, True)
    return EmbeddedBroker("127.0.0.1", free_port(), data)


def free_run(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports (nodes take --node-port and up)."""
    for _ in range(200):
        first = free_port()
        ok = True
        for port in range(first, first + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return first
    raise RuntimeError("no run of free ports")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def wait_ready(port: int, timeout: float = 600) -> float:
    """Seconds until GET /health answers 200."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    raise TimeoutError(f"node {port} not ready in {timeout}s")


class NodeProc:
    def __init__(self, port: int, args: list[str], log: Path,
                 env: dict[str, str] | None = None) -> None:
        self.port = port
        self.sql_port = int(args[args.index("--sql-port") + 1]) if "--sql-port" in args else 0
        log.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log, "ab")  # noqa: SIM115 - child's output for its lifetime
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamiq", "node", "--port", str(port), *args],
            stdout=self._log, stderr=subprocess.STDOUT,
            env=None if env is None else {**os.environ, **env})

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


def stop_all(clusters: Iterable[list[NodeProc]], broker: EmbeddedBroker, root: Path) -> None:
    """Stop every node of ``clusters``, then the broker; remove ``root``."""
    for nodes in clusters:
        for n in nodes:
            n.stop()
    broker.stop()
    shutil.rmtree(root, ignore_errors=True)
