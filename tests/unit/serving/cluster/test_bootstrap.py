"""Bootstrap: a partition never held is copied from the replicas that report it, most
preferred first; a copy that fails costs the next replica, then the changelog (False);
nothing it meets is fatal (serving/cluster/bootstrap.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from streamiq.routing.router import Endpoint
from streamiq.serving.changelog.materializer import COPY_MIN_RECORDS
from streamiq.serving.changelog.partition import Transfer
from streamiq.serving.cluster import bootstrap as module
from streamiq.serving.cluster.bootstrap import Bootstrap
from streamiq.serving.cluster.copy import CopyFailed
from streamiq.state import Checkpoint, MemoryStore, Snapshot, SnapshotError


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
                           settings=SimpleNamespace(member_timeout_ms=0),
                           materializer=SimpleNamespace(stopped=False), transfers={},
                           collectors=[])


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
    boot = Bootstrap(node, "1", None)
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
    boot = Bootstrap(node, "1", None)
    assert boot("v", 2) is False
    assert asked == (["a:1", "b:1"] if not isinstance(failure, RuntimeError) else ["a:1"])
    assert node.stores["v"].checkpoint(2) is None  # nothing taken in
    assert not list(tmp_path.glob("_copies/*"))


def test_no_replica_reporting_it_is_the_changelog_at_once(tmp_path: Path) -> None:
    assert Bootstrap(_node(tmp_path, ["me:1"]), "1", None)("v", 2) is False


def test_a_short_changelog_is_replayed_not_copied(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    async def fetch(address: str, *args: Any, **kw: Any) -> Snapshot:
        asked.append(address)
        raise CopyFailed("cut")

    monkeypatch.setattr(module, "fetch_snapshot", fetch)
    node = _node(tmp_path, ["a:1", "b:1"], {"a:1": COPY_MIN_RECORDS - 1})
    assert Bootstrap(node, "1", None)("v", 2) is False
    assert asked == ["b:1"]  # a's partition is short: not asked
