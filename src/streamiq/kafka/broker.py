"""The embedded broker: Apache Kafka in KRaft combined mode, one JVM per broker.

``streamiq up`` (and the test suite) run one node that is broker and controller at once,
its log on disk in ``data_dir`` so that a restart keeps every topic. The jars come from
:mod:`streamiq.kafka.jars` (resolved by Ivy at install time). Several brokers form one
cluster when each is given the same ``voters`` (node id -> controller host:port) and
``cluster_id``. Production deployments point ``--bootstrap-servers`` at their own Kafka.
"""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path
from types import TracebackType

from streamiq.kafka.cds import archive_flags
from streamiq.kafka.jars import JarsError, classpath

__all__ = ["BrokerError", "EmbeddedBroker", "port_in_use", "wait_for_port"]

#: JVM heap of an embedded broker (MB): what one demo or test session needs, bounded
DEFAULT_HEAP_MB = 384
_LOG4J = """Configuration:
  Appenders:
    Console:
      name: OUT
      target: SYSTEM_OUT
      PatternLayout:
        pattern: "%d{HH:mm:ss} %p %m (%c{1})%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef:
        - ref: OUT
    Logger:
      - name: org.apache.kafka.controller.QuorumController
        level: ERROR
"""
#: settings for brokers on one laptop or CI machine (each is Kafka's own setting)
_DEV = {
    "group.initial.rebalance.delay.ms": "0",  # a group of one is assigned at once
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.num.partitions": "4",  # idempotent producers' first start
    "log.retention.check.interval.ms": "30000",
    "num.network.threads": "2", "num.io.threads": "4",
    "log.cleaner.threads": "1", "log.cleaner.dedupe.buffer.size": str(16 << 20),
    "log.cleaner.backoff.ms": "1000",  # a compacted topic is cleaned soon after it may be
    "auto.create.topics.enable": "false",
}


class BrokerError(RuntimeError):
    """The embedded broker could not be started."""


def port_in_use(host: str, port: int) -> bool:
    """True when something already accepts or holds ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float, proc: subprocess.Popen[bytes] | None = None
                  ) -> bool:
    """Wait until ``host:port`` accepts connections (False on timeout or process exit)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding, never
    starting with ``-`` (as Kafka's own ``Uuid.randomUuid``: command-line tools would
    take it for an option)."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


class EmbeddedBroker:
    """One Apache Kafka broker+controller on ``host:port``, its log in ``data_dir``.

    ``start`` formats an empty ``data_dir`` once and waits until the broker answers
    metadata; ``stop`` shuts it down cleanly (SIGTERM, then SIGKILL after ``grace``).
    Use as a context manager or call start/stop; ``start`` again after a crash resumes
    from the log on disk.
    """

    def __init__(self, host: str, port: int, data_dir: Path | str, *,
                 heap_mb: int = DEFAULT_HEAP_MB, node_id: int = 1,
                 voters: dict[int, tuple[str, int]] | None = None,
                 cluster_id: str | None = None, config: dict[str, str] | None = None,
                 archiving_to: Path | None = None) -> None:
        self.host = host
        self.port = port
        self.data_dir = Path(data_dir).resolve()
        self.heap_mb = heap_mb
        self.node_id = node_id
        self._voters = voters
        self.cluster_id = cluster_id
        self.config = dict(config or {})
        self.archiving_to = archiving_to  # kafka/cds.py: this run writes the archive there
        self.proc: subprocess.Popen[bytes] | None = None
        self.formatted = False  # True once a start found no log and made a new one

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "broker.log"

    def voters(self) -> dict[int, tuple[str, int]]:
        """Controller quorum: the one given, else this node alone on a port kept on disk:
        the broker's port + 1 when free (9093 beside 9092, as Kafka's quickstart), else
        one the system picks (in its ephemeral range: taken sooner by chance)."""
        if self._voters is not None:
            return self._voters
        saved = self.data_dir / "controller.port"
        port = int(saved.read_text()) if saved.is_file() else 0
        if not port or port_in_use(self.host, port):
            nxt = self.port + 1
            port = nxt if nxt < 65536 and not port_in_use(self.host, nxt) \
                else free_port(self.host)
            saved.write_text(f"{port}\n")
        self._voters = {self.node_id: (self.host, port)}
        return self._voters

    def properties(self) -> dict[str, str]:
        voters = self.voters()
        chost, cport = voters[self.node_id]
        replicas = str(min(3, len(voters)))
        in_sync = "2" if len(voters) > 2 else "1"  # a write survives one broker's loss
        return {
            "process.roles": "broker,controller", "node.id": str(self.node_id),
            "controller.quorum.voters": ",".join(f"{i}@{h}:{p}" for i, (h, p) in voters.items()),
            "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{chost}:{cport}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "log"),
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "share.coordinator.state.topic.replication.factor": replicas,
            "default.replication.factor": replicas,
            "transaction.state.log.min.isr": in_sync,
            "share.coordinator.state.topic.min.isr": in_sync,
            "min.insync.replicas": in_sync,
            **_DEV, **self.config,
        }

    def _java(self) -> str:
        home = os.environ.get("JAVA_HOME")
        java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
        if not java:
            raise BrokerError("Java was not found (the embedded Kafka broker needs Java 17): "
                              "install it or set JAVA_HOME")
        return java

    def command(self, main: str = "kafka.Kafka", *args: str) -> list[str]:
        try:
            cp = classpath()
        except JarsError as exc:
            raise BrokerError(str(exc)) from None
        heap = f"-Xmx{self.heap_mb}m"
        if self.archiving_to is None:
            share = archive_flags()  # kafka/cds.py: the class-data archive, when made
        else:
            share = [f"-XX:ArchiveClassesAtExit={self.archiving_to}"] if main == "kafka.Kafka" \
                else []
        return [self._java(), "-server", heap, f"-Xms{min(self.heap_mb, 128)}m",
                "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError",
                *([] if main == "kafka.Kafka" else ["-XX:TieredStopAtLevel=1"]),  # a tool
                *share, *shlex.split(os.environ.get("KAFKA_OPTS", "")),  # as Kafka's scripts
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.yaml'}",
                "-cp", cp, main, *args]

    def _prepare(self) -> Path:
        """Write the configuration; format the log directory the first time."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "log4j2.yaml").write_text(_LOG4J)
        conf = self.data_dir / "server.properties"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        if not (self.data_dir / "log" / "meta.properties").is_file():
            self.formatted = True
            cid = self.cluster_id or new_cluster_id()
            done = subprocess.run(self.command("kafka.tools.StorageTool", "format",
                                               "--ignore-formatted", f"--cluster-id={cid}",
                                               "-c", str(conf)),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if done.returncode != 0:
                tail = done.stdout.decode(errors="replace").strip().splitlines()[-3:]
                raise BrokerError(f"formatting {self.data_dir} failed: {' '.join(tail)}")
        return conf

    def start(self, timeout: float = 120.0) -> EmbeddedBroker:
        self.command()  # first: missing jars or Java are said before a busy port
        if port_in_use(self.host, self.port):
            raise BrokerError(f"port {self.host}:{self.port} is already in use "
                              "(use --broker-port, or --bootstrap-servers for an existing Kafka)")
        conf = self._prepare()
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(self.command("kafka.Kafka", str(conf)), stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        if not (wait_for_port(self.host, self.port, timeout, self.proc)
                and self._answers(timeout)):
            self.stop(grace=2)
            raise BrokerError(f"the embedded Kafka broker did not start on "
                              f"{self.bootstrap_servers} (see {self.log_file})")
        return self

    def _answers(self, timeout: float) -> bool:
        """The broker answers metadata (it listens a moment before it serves)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive():
            try:
                if admin.list_topics(timeout=2).brokers:
                    return True
            except Exception:  # not yet: KafkaException(_TRANSPORT, ...)
                time.sleep(0.1)
        return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL (tests and benchmarks of a broker crash)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def stop(self, grace: float = 30.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # a controlled shutdown: the next start skips recovery
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
