"""A restarted node resumes from its RocksDB checkpoint; a stale checkpoint is rebuilt; a
node with ``--store memory`` serves and restores everything again after a restart."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from changelog import produce_rows
from procs import HTTP, free_port, free_ports

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.broker import EmbeddedBroker
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration


def _rows(n: int, bump: int = 0) -> list[dict[str, Any]]:
    return [{"account": f"r{i}", "balance": i + bump, "count": 1, "last_update": 0}
            for i in range(n)]


def _node_args(bootstrap: str, port: int, state: Path, *extra: str) -> list[str]:
    return ["--bootstrap-servers", bootstrap, "--cluster", "restart", "--app", "bank",
            "--port", str(port),
            "--state-dir", str(state), "--standby-replicas", "0", "--no-auth", *extra]


def _balance(port: int, account: str) -> int | None:
    r = HTTP.get(f"http://127.0.0.1:{port}/account/{account}")
    return r.json()["value"]["balance"] if r.status_code == 200 else None


def test_restart_resumes_from_checkpoint(bootstrap: str, tmp_path: Path, procs: Any) -> None:
    topic = BALANCES.changelog_topic
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    produce_rows(bootstrap, topic, BALANCES, _rows(300))
    port, state = free_port(), tmp_path / "state"
    first = procs("node", _node_args(bootstrap, port, state), name="first")
    first.wait_ready(f"http://127.0.0.1:{port}/health")
    assert _balance(port, "r42") == 42
    first.stop()
    # SIGTERM is a graceful stop: status 0, and every RocksDB store closed by the app's
    # lifespan shutdown (RocksDB logs its shutdown in each store's LOG)
    assert first.proc is not None and first.proc.returncode == 0
    logs = list(state.rglob("LOG"))
    assert logs and all("Shutdown complete" in p.read_text(errors="replace") for p in logs)
    produce_rows(bootstrap, topic, BALANCES, _rows(10, bump=1000))  # r0..r9 change
    second = procs("node", _node_args(bootstrap, port, state), name="second")
    second.wait_ready(f"http://127.0.0.1:{port}/health")
    assert _balance(port, "r5") == 1005 and _balance(port, "r42") == 42
    resumed = [int(o) for o in re.findall(r"resuming from changelog offset (\d+)", second.log())]
    assert len(resumed) == 3 and sum(resumed) == 300, resumed  # not from 0: from the checkpoint


def test_a_memory_node_serves_and_restores_from_the_changelog_after_a_restart(
        bootstrap: str, tmp_path: Path, procs: Any) -> None:
    prefix = f"mem{uuid.uuid4().hex[:6]}-"  # its own topics and cluster on the session broker
    topic = prefix + BALANCES.changelog_topic
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    produce_rows(bootstrap, topic, BALANCES, _rows(300))
    port, state = free_port(), tmp_path / "state"
    args = _node_args(bootstrap, port, state, "--store", "memory", "--topic-prefix", prefix,
                      "--cluster", prefix + "c")
    first = procs("node", args, name="first")
    first.wait_ready(f"http://127.0.0.1:{port}/health")
    assert _balance(port, "r42") == 42 and _balance(port, "r300") is None
    first.stop()
    assert list(state.rglob("CURRENT")) == []  # no RocksDB database was made
    produce_rows(bootstrap, topic, BALANCES, _rows(10, bump=1000))  # r0..r9 change
    second = procs("node", args, name="second")
    second.wait_ready(f"http://127.0.0.1:{port}/health")
    assert _balance(port, "r5") == 1005 and _balance(port, "r42") == 42
    resumed = [int(o) for o in re.findall(r"resuming from changelog offset (\d+)", second.log())]
    assert resumed == [0, 0, 0]  # nothing kept: every partition restored from the start


def test_checkpoint_beyond_a_new_log_is_rebuilt(tmp_path: Path, procs: Any) -> None:
    port, state = free_port(), tmp_path / "state"
    with EmbeddedBroker("127.0.0.1", free_ports(2), tmp_path / "old-kafka") as old:
        ensure_topics({"bootstrap.servers": old.bootstrap_servers}, {BALANCES.changelog_topic: 3})
        produce_rows(old.bootstrap_servers, BALANCES.changelog_topic, BALANCES, _rows(200))
        n = procs("node", _node_args(old.bootstrap_servers, port, state), name="old")
        n.wait_ready(f"http://127.0.0.1:{port}/health")
        assert _balance(port, "r150") == 150
        n.stop()
    with EmbeddedBroker("127.0.0.1", free_ports(2), tmp_path / "new-kafka") as new:  # another log
        ensure_topics({"bootstrap.servers": new.bootstrap_servers}, {BALANCES.changelog_topic: 3})
        produce_rows(new.bootstrap_servers, BALANCES.changelog_topic, BALANCES, _rows(5, 7))
        n = procs("node", _node_args(new.bootstrap_servers, port, state), name="new")
        n.wait_ready(f"http://127.0.0.1:{port}/health")
        assert _balance(port, "r3") == 10
        assert _balance(port, "r150") is None  # the old log's rows are gone, not served
        n.stop()


def test_a_taken_port_fails_at_once_naming_the_flag_and_never_joins(
        bootstrap: str, tmp_path: Path) -> None:
    """The HTTP port is bound before the node opens: a port another process holds ends the
    node at once with status 3 and a message naming --port, before it joins the members
    (a node that announced itself without its port would draw forwards it cannot take)."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "streamiq", "node",
             *_node_args(bootstrap, port, tmp_path / "state")],
            capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr[-2000:]
    assert f"cannot listen on 127.0.0.1:{port} (--host/--port)" in done.stderr
    assert "Traceback" not in done.stderr
    assert "members" not in done.stdout + done.stderr  # never opened, never joined
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir())
