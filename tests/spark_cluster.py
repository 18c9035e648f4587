"""A Spark standalone cluster from the installed PySpark: a master and workers started
with ``spark-class`` (the pip package has no start-master script), each a JVM in a
session of its own, stopped (with the executors they launched) by process group.

    cluster = SparkStandalone(root, host, workers=2).start()
    cluster.url                      # spark://host:port, for --master
    cluster.kill_worker(0)           # SIGKILL, as a lost machine
    cluster.stop()
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pyspark
from procs import HTTP, free_port

__all__ = ["SparkStandalone"]

SPARK_HOME = Path(pyspark.__file__).parent


class SparkStandalone:
    def __init__(self, root: Path, host: str, workers: int = 2, cores: int = 1,
                 memory: str = "1g") -> None:
        self.root = root
        self.host = host
        self.port, self.ui = free_port(), free_port()
        self.url = f"spark://{host}:{self.port}"
        self.workers, self.cores, self.memory = workers, cores, memory
        self.procs: list[subprocess.Popen[bytes]] = []  # master first, then workers

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child's lifetime
        env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": self.host,
               "SPARK_NO_DAEMONIZE": "1"}
        p = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], stdout=log,
                             stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append(p)
        return p

    def start(self, timeout: float = 120) -> SparkStandalone:
        self.root.mkdir(parents=True, exist_ok=True)
        self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", self.host,
                               "--port", str(self.port), "--webui-port", str(self.ui)])
        for i in range(self.workers):
            self._spawn(f"worker-{i}", [
                "org.apache.spark.deploy.worker.Worker", self.url, "--host", self.host,
                "--cores", str(self.cores), "--memory", self.memory,
                "--webui-port", str(free_port()), "--work-dir", str(self.root / f"work-{i}")])
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            assert time.monotonic() < deadline, f"workers not registered; {self.log('master')}"
            assert all(p.poll() is None for p in self.procs), self.log("master")
            time.sleep(0.5)
        return self

    def state(self) -> dict[str, object]:
        try:
            doc: dict[str, object] = HTTP.get(f"http://{self.host}:{self.ui}/json/",
                                              timeout=5).json()
            return doc
        except (httpx.HTTPError, ValueError):
            return {}

    def alive_workers(self) -> int:
        return int(str(self.state().get("aliveworkers", 0)))

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker ``i`` and the executors it launched (its process group)."""
        p = self.procs[1 + i]
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(30)

    def log(self, name: str) -> str:
        path = self.root / f"{name}.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def stop(self) -> None:
        for p in reversed(self.procs):  # workers (and their executors) first
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)  # executors left in the group
