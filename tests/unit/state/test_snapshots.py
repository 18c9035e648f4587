"""Partition snapshots over every store kind: one partition exported whole and taken in
by another store of the kind, replacing what it held there and nothing else; a snapshot
corrupted, cut short, of another partition or another kind is refused with the
partition left as it was (issue 49 item 1's store side)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamiq.state import KINDS, Checkpoint, Store, open_store
from streamiq.state.snapshots import Snapshot, SnapshotError, file_digest

CP = Checkpoint(offset=1_000, position={"in": {1: 70}, "other": {0: 3}})


@pytest.fixture(params=KINDS)
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    a = open_store(request.param, tmp_path / "a")
    b = open_store(request.param, tmp_path / "b")
    for p in range(3):  # a: three partitions; b: other rows in each
        a.apply(p, [(f"k{i:04d}".encode(), f"v{p}-{i}".encode()) for i in range(500)],
                CP if p == 1 else Checkpoint(offset=p))
        b.apply(p, [(b"stale", b"x"), (b"k0001", b"old")], Checkpoint(offset=5))
    yield a, b
    a.close()
    b.close()


def test_a_partition_moves_whole_and_alone(pair: tuple[Store, Store], tmp_path: Path) -> None:
    a, b = pair
    snap = a.export(1, tmp_path / "p1.snap")
    assert snap is not None
    assert (snap.partition, snap.rows, snap.checkpoint) == (1, 500, CP)
    assert snap.sha256 == file_digest(snap.path) and snap.size == snap.path.stat().st_size
    a.apply(1, [(b"k0000", b"later")], Checkpoint(offset=1_001))  # after: not in it
    assert b.ingest(snap) == CP
    assert list(b.scan(1)) == [(f"k{i:04d}".encode(), f"v1-{i}".encode())
                               for i in range(500)]
    assert b.get(1, b"stale") is None  # what b held there is gone
    assert b.checkpoint(1) == CP
    assert b.get(0, b"stale") == b"x" and b.get(2, b"k0001") == b"old"  # others untouched
    assert b.checkpoint(0) == Checkpoint(offset=5)
    assert not snap.path.exists()  # taken in


def test_a_partition_never_held_has_no_snapshot(pair: tuple[Store, Store],
                                                tmp_path: Path) -> None:
    assert pair[0].export(7, tmp_path / "p7.snap") is None


def test_an_empty_partition_moves_with_its_checkpoint(pair: tuple[Store, Store],
                                                      tmp_path: Path) -> None:
    a, b = pair
    a.apply(5, [], Checkpoint(offset=9))
    snap = a.export(5, tmp_path / "p5.snap")
    assert snap is not None and snap.rows == 0
    assert b.ingest(snap) == Checkpoint(offset=9)
    assert list(b.scan(5)) == [] and b.checkpoint(5) == Checkpoint(offset=9)


def _refused(b: Store, snap: Snapshot, match: str) -> None:
    with pytest.raises(SnapshotError, match=match):
        b.ingest(snap)
    assert b.get(1, b"stale") == b"x" and b.get(1, b"k0001") == b"old"  # as it was
    assert b.checkpoint(1) == Checkpoint(offset=5)


def test_flipped_bytes_are_refused(pair: tuple[Store, Store], tmp_path: Path) -> None:
    a, b = pair
    snap = a.export(1, tmp_path / "p1.snap")
    assert snap is not None
    data = bytearray(snap.path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    snap.path.write_bytes(bytes(data))
    _refused(b, snap, "SHA-256")


def test_a_file_cut_short_is_refused(pair: tuple[Store, Store], tmp_path: Path) -> None:
    a, b = pair
    snap = a.export(1, tmp_path / "p1.snap")
    assert snap is not None
    snap.path.write_bytes(snap.path.read_bytes()[: snap.size // 2])
    _refused(b, snap, "cut short")


def test_a_file_of_another_partition_is_refused(pair: tuple[Store, Store],
                                                tmp_path: Path) -> None:
    a, b = pair
    snap = a.export(2, tmp_path / "p2.snap")
    assert snap is not None
    _refused(b, dataclasses.replace(snap, partition=1), "partition")


def test_a_checkpoint_not_the_one_announced_is_refused(pair: tuple[Store, Store],
                                                       tmp_path: Path) -> None:
    a, b = pair
    snap = a.export(1, tmp_path / "p1.snap")
    assert snap is not None
    _refused(b, dataclasses.replace(snap, checkpoint=Checkpoint(offset=2_000)),
             "not the one announced")


def test_garbage_with_a_matching_digest_is_refused(pair: tuple[Store, Store],
                                                   tmp_path: Path) -> None:
    a, b = pair
    snap = a.export(1, tmp_path / "p1.snap")
    assert snap is not None
    junk = tmp_path / "junk"
    junk.write_bytes(b"\x00not a snapshot\n" * 64)
    forged = dataclasses.replace(snap, path=junk, size=junk.stat().st_size,
                                 sha256=file_digest(junk))
    _refused(b, forged, "not a")
    assert not list(tmp_path.glob("*.check"))  # the scratch check leaves nothing behind


def test_another_kinds_snapshot_is_refused(tmp_path: Path) -> None:
    rocks, memory = open_store("rocksdb", tmp_path / "r"), open_store("memory", tmp_path / "m")
    for s in (rocks, memory):
        s.apply(1, [(b"stale", b"x"), (b"k0001", b"old")], Checkpoint(offset=5))
    from_rocks = rocks.export(1, tmp_path / "r.snap")
    from_memory = memory.export(1, tmp_path / "m.snap")
    assert from_rocks is not None and from_memory is not None
    _refused(memory, from_rocks, "rocksdb-db-1")
    _refused(rocks, from_memory, "memory-1")
    rocks.close()
