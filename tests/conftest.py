"""Shared fixtures: one Apache Kafka broker and one SparkSession per session, factories."""

from __future__ import annotations

import gc
import os
import sys
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from procs import FAST_ENV, FAST_JVM, free_port, free_ports

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.broker import EmbeddedBroker

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
for _name, _value in FAST_ENV.items():  # pipelines and brokers the tests start (procs.py)
    os.environ.setdefault(_name, _value)


#: the slowest test files (several real parts, Spark starts, kills), slowest first as
#: measured in a fresh clone's ``make test`` (3 workers; 2026-12-01, each 40 s or more
#: of a worker's time), handed out first so that the workers (pytest-xdist, ``--dist
#: loadfile --no-loadscope-reorder``: a file's tests on one worker, its module fixtures
#: started once, the files in this order) finish together; the rest keep their order
SLOW_FIRST = ("test_up.py", "test_examples.py", "test_up_pip.py", "test_multihost.py",
              "test_up_consistency.py", "test_pipeline_e2e.py", "test_up_changes.py",
              "test_positions.py", "test_transfers.py", "test_bad_input.py",
              "test_poison_fuzz.py", "test_staleness.py", "test_sql_attacks.py",
              "test_cli_e2e.py", "test_kafka_cluster.py", "test_view_discovery.py",
              "test_sink.py", "test_realtime.py", "test_restore_from_peer.py",
              "test_hung_node.py", "test_ingest_lean.py", "test_queries.py",
              "test_cuts.py", "test_poison_changelog.py", "test_dashboard_browser.py",
              "test_connector_source.py", "test_read_your_writes.py", "test_bank_e2e.py",
              "test_scale_out.py", "test_poison_records.py", "test_metrics_e2e.py",
              "test_sql_e2e.py", "test_fail_closed.py", "test_ticks.py", "test_ha.py",
              "test_fuzz_openapi.py", "test_dead_letter_docs.py", "test_node_restart.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    """One Apache Kafka broker (KRaft, its log in the session's temporary folder)."""
    b = EmbeddedBroker("127.0.0.1", free_ports(2),  # and its controller's port, the next
                       tmp_path_factory.mktemp("kafka")).start()
    yield b
    # clients the tests made and dropped in reference cycles go now, while their broker
    # answers, not after it (in some runs librdkafka printed connection failures to a
    # worker's stderr as the run ended)
    gc.collect()
    b.stop()


@pytest.fixture(scope="session")
def bootstrap(broker: EmbeddedBroker) -> str:
    return broker.bootstrap_servers


@pytest.fixture
def make_topic(bootstrap: str) -> Callable[..., str]:
    """Create a uniquely named topic: make_topic(partitions=3, prefix="t") -> name."""

    def make(partitions: int = 3, prefix: str = "t") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        ensure_topics({"bootstrap.servers": bootstrap}, {name: partitions})
        return name

    return make


@pytest.fixture(scope="session")
def spark(broker: EmbeddedBroker) -> Iterator[Any]:
    """Depends on the broker so that it stops first: its Python workers' cached Kafka
    clients would otherwise retry a stopped broker while the session ends."""
    from streamiq.pipeline.session import spark_session

    s = spark_session("local[2]", app_name="streamiq-tests", shuffle_partitions=None,
                      **{"spark.driver.extraJavaOptions": FAST_JVM})
    yield s
    s.stop()


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """Factory for real streamiq processes; every one is stopped (by PID) at teardown.

    procs("node", [...flags], name="node-1") -> tests.procs.Proc (started)
    """
    from procs import Proc

    started: list[Proc] = []

    def make(command: str, args: list[str], name: str | None = None,
             prefix: list[str] | None = None) -> Proc:
        p = Proc(command, args, tmp_path / "logs", name or f"{command}-{len(started)}",
                 prefix).start()
        started.append(p)
        return p

    yield make
    for p in reversed(started):
        p.stop()


@pytest.fixture
def cluster(bootstrap: str, tmp_path: Path, procs: Callable[..., Any]) -> Any:
    """A private deployment on the session broker: its own cluster name and topic prefix.

    cluster.nodes(3, app="bank") -> [(port, Proc)], cluster.ingest(app) -> (port, Proc),
    cluster.pipeline(app) -> Proc (waits for "pipeline ready").
    """
    from procs import Deployment

    return Deployment(bootstrap, tmp_path, procs, free_port)


#: lines of a part's output that tell why a test through it failed
_TELLING = ("WARNING", " WARN ", "ERROR", "Traceback", "Error:", "exited at", "restarting")
_SHOWN = 25  # of them, the last


def _telling(path: Path) -> list[str]:
    """The telling lines of a log (up's, or one part's); a long one's start and end
    (where a JSON log line's trace ends with its exception)."""
    return [ln if len(ln) < 500 else f"{ln[:150]} [...] {ln[-350:]}"
            for ln in path.read_text(errors="replace").splitlines()
            if any(t in ln for t in _TELLING)]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed test that ran real parts shows the telling lines of their output (their
    warnings and errors, restarts): those of ``streamiq up`` (tests/updemo.py), and of
    each part the ``procs`` factory started (tests/procs.py, ``tmp_path/logs``). CI
    keeps nothing else of a run."""
    report = yield
    if report.failed and call.when == "call":
        args = getattr(item, "funcargs", {})
        logs = [p for p in (getattr(a, "log_path", None) for a in args.values())
                if isinstance(p, Path)]
        if "procs" in args and isinstance(args.get("tmp_path"), Path):
            logs += sorted((args["tmp_path"] / "logs").glob("*.log"))
        for path in logs:
            if path.exists():
                lines = _telling(path)[-_SHOWN:]
                report.sections.append((f"{path.name}: its last {len(lines)} telling lines",
                                        "\n".join(lines)))
    return report
