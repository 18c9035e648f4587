"""A node whose state folder is wiped takes its partitions from a peer's snapshot, not
the changelog, and answers every key exactly (issue 49 item 1); when the only peer
holding them is gone (or with ``--no-peer-copy``), it replays each from the changelog in
a process of its own, and with ``--no-restore-processes`` in its own thread, as before."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from changelog import produce_rows
from procs import free_port
from updemo import exact, metric

from streamiq.kafka.admin import ensure_topics
from streamiq.serving.node import COPIES, SNAPSHOTS, state_path
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

ROWS = 120_000  # two partitions of about 60k: past COPY_MIN_RECORDS (a shorter one is replayed)
SECRET = "boot-secret"


def _rows() -> dict[str, int]:
    return {f"b{i}": i * 3 for i in range(ROWS)}


def _start(procs: Any, bootstrap: str, prefix: str, port: int, state: Path, name: str,
           *extra: str) -> Any:
    node = procs("node", ["--bootstrap-servers", bootstrap, "--cluster", prefix,
                          "--topic-prefix", prefix, "--app", "bank", "--partitions", "2",
                          "--port", str(port), "--state-dir", str(state),
                          "--standby-replicas", "1", "--no-auth", "--cluster-secret", SECRET,
                          *extra],
                 name=name)
    node.wait_ready(f"http://127.0.0.1:{port}/health", timeout=120)
    return node


def _setup(bootstrap: str) -> tuple[str, dict[str, int]]:
    prefix = f"bt{uuid.uuid4().hex[:6]}-"
    ensure_topics({"bootstrap.servers": bootstrap}, {prefix + BALANCES.changelog_topic: 2})
    rows = _rows()
    produce_rows(bootstrap, prefix + BALANCES.changelog_topic, BALANCES,
                 ({"account": a, "balance": b, "count": 1, "last_update": 0}
                  for a, b in rows.items()))
    return prefix, rows


def test_a_wiped_node_copies_its_partitions_from_a_peer(bootstrap: str, tmp_path: Path,
                                                        procs: Any) -> None:
    prefix, rows = _setup(bootstrap)
    pa, pb = free_port(), free_port()
    _start(procs, bootstrap, prefix, pa, tmp_path / "a", "node-a")
    b = _start(procs, bootstrap, prefix, pb, tmp_path / "b", "node-b")
    b.stop()
    shutil.rmtree(tmp_path / "b")  # the disk wiped
    for transit in (COPIES, SNAPSHOTS):  # but what a crash mid-copy left
        stale = state_path(tmp_path / "b", f"127.0.0.1:{pb}") / transit / "stale"
        stale.parent.mkdir(parents=True)
        stale.write_bytes(b"x" * 1000)
    b = _start(procs, bootstrap, prefix, pb, tmp_path / "b", "node-b2")
    log = b.log()
    assert log.count(f"copied from 127.0.0.1:{pa}") == 2, log[-3000:]  # both partitions
    assert "restored" in log
    read = metric(pb, "streamiq_changelog_records_read_total")
    assert read < ROWS / 10, read  # the changelog was not replayed
    assert exact(pb, rows) is True
    # no copy left in transit, and what a crash left removed as the node opened
    assert not [*(tmp_path / "b").rglob(f"{COPIES}/*"), *(tmp_path / "b").rglob(
        f"{SNAPSHOTS}/*")]
    assert metric(pb, "streamiq_partition_copies_total") == 2  # copied 2, failed 0
    # --no-peer-copy: the operator's choice of the changelog, with the peer there
    b.stop()
    shutil.rmtree(tmp_path / "b")
    b = _start(procs, bootstrap, prefix, pb, tmp_path / "b", "node-b3", "--no-peer-copy")
    log = b.log()
    assert "copied from" not in log
    # each partition replayed by a process of its own, its records counted as read here
    assert log.count("replayed in a process") == 2, log[-3000:]
    assert metric(pb, "streamiq_partition_replays_total") == 2
    assert metric(pb, "streamiq_changelog_records_read_total") >= ROWS
    assert exact(pb, rows) is True
    # and --no-restore-processes: the node's own thread replays them, as before
    b.stop()
    shutil.rmtree(tmp_path / "b")
    b = _start(procs, bootstrap, prefix, pb, tmp_path / "b", "node-b4", "--no-peer-copy",
               "--no-restore-processes")
    assert "copied from" not in b.log() and "replayed in a process" not in b.log()
    assert metric(pb, "streamiq_changelog_records_read_total") >= ROWS
    assert exact(pb, rows) is True


def test_with_no_peer_holding_it_a_wiped_node_restores_from_the_changelog(
        bootstrap: str, tmp_path: Path, procs: Any) -> None:
    prefix, rows = _setup(bootstrap)
    pb = free_port()
    b = _start(procs, bootstrap, prefix, pb, tmp_path / "b", "node-b")
    b.stop()
    shutil.rmtree(tmp_path / "b")
    b = _start(procs, bootstrap, prefix, pb, tmp_path / "b", "node-b2")
    log = b.log()
    assert "copied from" not in log
    assert log.count("replayed in a process") == 2, log[-3000:]  # no peer: each in a child
    assert exact(pb, rows) is True
