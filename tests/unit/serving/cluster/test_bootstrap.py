"""Bootstrap: a partition never held is copied from the replicas that report it, most
preferred first; a copy that fails costs the next replica, then a replay in a process of
its own, then the materializer's replay (False); nothing it meets is fatal
(serving/cluster/bootstrap.py)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from streamiq.routing.router import Endpoint
from streamiq.serving.changelog.materializer import COPY_MIN_RECORDS
from streamiq.serving.changelog.partition import Replaying, Transfer
from streamiq.serving.changelog.replayer import ReplayFailed, ReplayJob
from streamiq.serving.cluster import bootstrap as module
from streamiq.serving.cluster.bootstrap import Bootstrap
from streamiq.serving.cluster.copy import CopyFailed
from streamiq.state import Checkpoint, MemoryStore, Snapshot, SnapshotError
from streamiq.views.bank import BALANCES


def _node(tmp_path: Path, replicas: list[str], offsets: dict[str, int] | None = None) -> Any:
    offsets = offsets or {}
    store = MemoryStore()
    router = SimpleNamespace(replicas=lambda v, p, lag: [Endpoint(a, "active", 0)
                                                         for a in replicas])
    reports = {a: SimpleNamespace(partitions={"v": {2: {
        "offset": offsets.get(a, COPY_MIN_RECORDS)}}}) for a in replicas}
    return SimpleNamespace(endpoint="me:1", router=router, stores={"v": store},
                           membership=SimpleNamespace(live=lambda: reports),
                           partitions={"v": 4}, state_root=lambda: tmp_path,
                           settings=SimpleNamespace(member_timeout_ms=0, store="memory",
                                                    store_memory_mb=64,
                                                    kafka=lambda: {"bootstrap.servers": "k:1",
                                                                   "logger": object()}),
                           materializer=_Materializer(), transfers={}, collectors=[])


class _Materializer:
    """What Bootstrap reads of the materializer: a changelog of ``end`` records."""

    def __init__(self, end: int = COPY_MIN_RECORDS) -> None:
        self.stopped = False
        self.topics = {"v": "v-changelog"}
        self.views = {"v": BALANCES}
        self.partitions = {"v": 4}
        self.end = end
        self.ends = SimpleNamespace(now=lambda tps: {tp: self.end for tp in tps})
        self.counted: list[tuple[str, Counter[str], int]] = []

    def count_skips(self, view: str, skips: Counter[str], read: int) -> None:
        self.counted.append((view, skips, read))


def _snapshot_of(tmp_path: Path) -> Snapshot:
    source = MemoryStore()
    source.apply(2, [(b"k", b"v")], Checkpoint(offset=9))
    snap = source.export(2, tmp_path / "source.snap")
    assert snap is not None
    return snap


def test_the_first_replica_that_sends_a_whole_copy_is_taken_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = _node(tmp_path, ["me:1", "a:1", "b:1", "c:1"])
    asked: list[str] = []
    snap = _snapshot_of(tmp_path)

    async def fetch(address: str, *args: Any, transfer: Transfer) -> Snapshot:
        asked.append(address)
        assert node.transfers == {("v", 2): transfer} and transfer.peer == address  # shown
        if address == "a:1":
            raise CopyFailed("the sender closed the connection")
        return snap

    monkeypatch.setattr(module, "fetch_snapshot", fetch)
    boot = Bootstrap(node, "1", None, processes=False)
    assert boot("v", 2) is True
    assert asked == ["a:1", "b:1"]  # never itself; the next after a failure
    assert node.stores["v"].get(2, b"k") == b"v" and node.stores["v"].checkpoint(2).offset == 9
    assert (boot.copied, boot.failed) == (1, 1) and node.transfers == {}  # none under way
    got = {(x.name, tuple(x.labels.values())): x.value for m in boot.metrics()
           for x in m.samples}
    assert got[("streamiq_partition_copies_total", ("copied",))] == 1
    assert got[("streamiq_partition_copies_total", ("failed",))] == 1
    assert got[("streamiq_partition_copied_rows_total", ())] == snap.rows


@pytest.mark.parametrize("failure", [CopyFailed("cut"), SnapshotError("bad digest"),
                                     OSError("disk full"), RuntimeError("a bug")])
def test_copies_that_fail_leave_the_changelog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              failure: Exception) -> None:
    node = _node(tmp_path, ["a:1", "b:1", "c:1"])
    asked: list[str] = []

    async def fetch(address: str, *args: Any, **kw: Any) -> Snapshot:
        asked.append(address)
        raise failure

    monkeypatch.setattr(module, "fetch_snapshot", fetch)
    boot = Bootstrap(node, "1", None, processes=False)
    assert boot("v", 2) is False
    assert asked == (["a:1", "b:1"] if not isinstance(failure, RuntimeError) else ["a:1"])
    assert node.stores["v"].checkpoint(2) is None  # nothing taken in
    assert not list(tmp_path.glob("_copies/*"))


def test_no_replica_reporting_it_is_the_changelog_at_once(tmp_path: Path) -> None:
    assert Bootstrap(_node(tmp_path, ["me:1"]), "1", None, processes=False)("v", 2) is False


def test_a_short_changelog_is_replayed_not_copied(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    async def fetch(address: str, *args: Any, **kw: Any) -> Snapshot:
        asked.append(address)
        raise CopyFailed("cut")

    monkeypatch.setattr(module, "fetch_snapshot", fetch)
    node = _node(tmp_path, ["a:1", "b:1"], {"a:1": COPY_MIN_RECORDS - 1})
    assert Bootstrap(node, "1", None, processes=False)("v", 2) is False
    assert asked == ["b:1"]  # a's partition is short: not asked


def _no_peer_copy(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    asked: list[str] = []

    async def fetch(address: str, *args: Any, **kw: Any) -> Snapshot:
        asked.append(address)
        raise CopyFailed("cut")

    monkeypatch.setattr(module, "fetch_snapshot", fetch)
    return asked


@pytest.mark.parametrize("peers", [True, False])
def test_with_no_copy_the_partition_is_replayed_in_a_process_and_taken_in(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peers: bool) -> None:
    asked = _no_peer_copy(monkeypatch)
    node = _node(tmp_path, ["a:1"])
    snap = _snapshot_of(tmp_path)
    jobs: list[ReplayJob] = []

    def replay(job: ReplayJob, progress: Replaying, stopped: Any
               ) -> tuple[Snapshot, Counter[str], int]:
        jobs.append(job)
        assert node.transfers == {("v", 2): progress} and progress.end == COPY_MIN_RECORDS
        assert stopped() is False
        return snap, Counter(not_json=2), 70_000

    monkeypatch.setattr(module, "replay", replay)
    boot = Bootstrap(node, "1", None, peers=peers)
    assert boot("v", 2) is True
    assert asked == (["a:1"] if peers else [])  # the peer first, when asked to
    [job] = jobs
    assert (job.topic, job.partition, job.partitions, job.end, job.store) == (
        "v-changelog", 2, 4, COPY_MIN_RECORDS, "memory")
    assert job.kafka == {"bootstrap.servers": "k:1"}  # JSON only: the logger left out
    assert job.view["key_columns"] == ["account"]
    assert node.stores["v"].get(2, b"k") == b"v" and node.stores["v"].checkpoint(2).offset == 9
    assert node.materializer.counted == [("v", Counter(not_json=2), 70_000)]
    assert boot.replayed == 1 and node.transfers == {}
    assert not list(tmp_path.glob("_copies/*"))  # its scratch removed
    got = {x.name: x.value for m in boot.metrics() for x in m.samples}
    assert got["streamiq_partition_replays_total"] == 1


@pytest.mark.parametrize("failure", [ReplayFailed("exited (1)"), SnapshotError("bad digest"),
                                     OSError("disk full"), RuntimeError("a bug")])
def test_a_replay_that_fails_leaves_the_materializer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: Exception) -> None:
    _no_peer_copy(monkeypatch)
    node = _node(tmp_path, ["a:1"])

    def replay(*args: Any) -> Any:
        raise failure

    monkeypatch.setattr(module, "replay", replay)
    boot = Bootstrap(node, "1", None)
    assert boot("v", 2) is False
    assert node.stores["v"].checkpoint(2) is None and node.transfers == {}
    assert boot.replayed == 0 and not list(tmp_path.glob("_copies/*"))


def test_a_changelog_shorter_than_a_copy_is_worth_is_not_replayed_in_a_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_peer_copy(monkeypatch)
    node = _node(tmp_path, ["a:1"])
    node.materializer.end = COPY_MIN_RECORDS - 1  # compacted since the node asked
    monkeypatch.setattr(module, "replay", lambda *a: pytest.fail("replayed"))
    assert Bootstrap(node, "1", None)("v", 2) is False
