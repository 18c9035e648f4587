"""What only RocksDB does: its rows outlive the process, in a database per partition
that a start finds again (and a store of the layout before moved into). The behaviour
every store shares is tested over RocksDB and memory alike in test_store_contract.py
and test_snapshots.py."""

from __future__ import annotations

import io
import json
import struct
import tarfile
from pathlib import Path

import pytest
from rocksdict import Options, Rdict

from streamiq.state.base import Checkpoint
from streamiq.state.rocksdb import RocksDBStore
from streamiq.state.snapshots import SnapshotError, file_digest


def _folders(root: Path) -> list[str]:
    return sorted(f.name.split("-")[0] for f in root.iterdir() if f.is_dir())


def test_survives_reopen(tmp_path: Path) -> None:
    s = RocksDBStore(tmp_path / "db")
    s.apply(0, [(b"k", b"v")], Checkpoint(offset=7))
    s.apply(3, [(b"x", b"y")], Checkpoint(offset=2))
    s.close()
    s2 = RocksDBStore(tmp_path / "db")
    assert s2.get(0, b"k") == b"v" and s2.checkpoint(0) == Checkpoint(offset=7)
    assert list(s2.scan(3)) == [(b"x", b"y")] and s2.get(1, b"k") is None
    assert _folders(tmp_path / "db") == ["p0", "p3"]


def test_memory_is_bounded_and_lookups_use_a_bloom_filter(tmp_path: Path) -> None:
    """--store-memory-mb: three quarters a block cache holding the index and filter
    blocks too, shared by the partitions' databases; a quarter the write buffers (a
    write buffer manager over them all); a bloom filter per SST file."""
    s = RocksDBStore(tmp_path / "db", memory_mb=64)
    for p in range(3):
        s.apply(p, [(b"k", b"v")], Checkpoint(offset=1))
    dbs = [s._dbs[p][0] for p in range(3)]
    dbs[0].flush()
    assert s.get(0, b"k") == b"v"  # a block read into the cache
    caps = {db.property_int_value("rocksdb.block-cache-capacity") for db in dbs}
    used = {db.property_int_value("rocksdb.block-cache-usage") for db in dbs}
    assert caps == {48 << 20} and len(used) == 1 and used != {0}  # one cache for all
    folder = s._dbs[0][1]
    s.close()
    written = max(folder.glob("OPTIONS-*"))  # the newest
    options = {line.strip() for line in written.read_text().splitlines()}
    assert {"filter_policy=bloomfilter", "cache_index_and_filter_blocks=true",
            "pin_l0_filter_and_index_blocks_in_cache=true", "write_buffer_size=8388608",
            "max_write_buffer_number=2", "partition_filters=true",
            "index_type=kTwoLevelIndexSearch", "pin_top_level_index_and_filter=true",
            "metadata_block_size=4096"} <= options


def test_a_dropped_partition_stays_readable_to_a_read_that_found_it(tmp_path: Path) -> None:
    """A scan that began before the partition was dropped reads on; the folder goes at
    the next start (or RETIRE_S later), and the partition held again starts empty."""
    s = RocksDBStore(tmp_path / "db")
    s.apply(1, [(f"k{i}".encode(), b"v") for i in range(100)], Checkpoint(offset=100))
    rows = s.scan(1)
    assert next(rows) == (b"k0", b"v")
    s.drop(1)
    assert len(list(rows)) == 99
    assert s.get(1, b"k0") is None and s.checkpoint(1) is None
    s.apply(1, [(b"new", b"n")], Checkpoint(offset=1))
    s.close()
    assert _folders(tmp_path / "db") == ["p1"]
    s = RocksDBStore(tmp_path / "db")
    assert list(s.scan(1)) == [(b"new", b"n")]
    s.close()


def test_a_store_of_the_layout_before_is_moved_into_a_database_per_partition(
        tmp_path: Path) -> None:
    root = tmp_path / "db"
    old = Rdict(str(root), Options(raw_mode=True))
    pack = struct.Struct(">H").pack
    for p in (0, 2):
        for i in range(25_000):  # more than one batch of the move
            old[b"d" + pack(p) + f"k{i:05d}".encode()] = f"{p}-{i}".encode()
        old[b"m" + pack(p)] = json.dumps({"offset": 25_000 + p, "position": {
            "in": {"0": 9}}}).encode()
    old.close()
    s = RocksDBStore(root)
    assert s.checkpoint(2) == Checkpoint(offset=25_002, position={"in": {0: 9}})
    assert s.get(0, b"k00007") == b"0-7" and s.get(2, b"k24999") == b"2-24999"
    assert len(list(s.scan(0))) == 25_000 and s.checkpoint(1) is None
    s.close()
    assert not (root / "CURRENT").exists() and _folders(root) == ["p0", "p2"]


def _tar(tmp_path: Path, members: dict[str, bytes], partition: int = 1) -> object:
    from streamiq.state.base import Snapshot

    path = tmp_path / "evil.snap"
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return Snapshot("rocksdb-db-1", partition, path, Checkpoint(offset=5), 0,
                    path.stat().st_size, file_digest(path))


@pytest.mark.parametrize("members", [
    {"../escape": b"x"}, {"sub/file": b"x"}, {"CURRENT": b"MANIFEST-000001\n"}, {}])
def test_a_snapshot_that_is_not_a_database_folder_is_refused(
        tmp_path: Path, members: dict[str, bytes]) -> None:
    s = RocksDBStore(tmp_path / "db")
    s.apply(1, [(b"k", b"v")], Checkpoint(offset=5))
    with pytest.raises(SnapshotError):
        s.ingest(_tar(tmp_path, members))  # type: ignore[arg-type]
    assert s.get(1, b"k") == b"v" and s.checkpoint(1) == Checkpoint(offset=5)
    assert not (tmp_path / "escape").exists()
    assert _folders(tmp_path / "db") == ["p1"]  # nothing half received left
    s.close()
