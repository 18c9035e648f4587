from __future__ import annotations

from pathlib import Path

from streamiq.state.base import Checkpoint
from streamiq.state.rocksdb import RocksDBStore


def test_apply_get_scan_and_checkpoint_roundtrip(tmp_path: Path) -> None:
    s = RocksDBStore(tmp_path / "db")
    s.apply(1, [(b"b", b"2"), (b"a", b"1"), (b"c", b"3")],
            Checkpoint(offset=3, position={"in": {0: 10}}))
    s.apply(2, [(b"a", b"other")], Checkpoint(offset=1))
    assert s.get(1, b"a") == b"1" and s.get(2, b"a") == b"other" and s.get(1, b"zz") is None
    assert s.multi_get(1, [b"c", b"x"]) == [b"3", None]
    assert list(s.scan(1)) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert list(s.scan(1, b"b", b"c")) == [(b"b", b"2")]
    assert s.checkpoint(1) == Checkpoint(offset=3, position={"in": {0: 10}})
    assert sorted(s.partitions()) == [1, 2]


def test_delete_and_drop(tmp_path: Path) -> None:
    s = RocksDBStore(tmp_path / "db")
    s.apply(0, [(b"k", b"v")], Checkpoint(offset=1))
    s.apply(0, [(b"k", None)], Checkpoint(offset=2))
    assert s.get(0, b"k") is None and s.checkpoint(0) == Checkpoint(offset=2)
    s.apply(0, [(b"k", b"v")], Checkpoint(offset=3))
    s.drop(0)
    assert s.get(0, b"k") is None and s.checkpoint(0) is None and s.partitions() == []


def test_survives_reopen(tmp_path: Path) -> None:
    s = RocksDBStore(tmp_path / "db")
    s.apply(0, [(b"k", b"v")], Checkpoint(offset=7))
    s.close()
    s2 = RocksDBStore(tmp_path / "db")
    assert s2.get(0, b"k") == b"v" and s2.checkpoint(0) == Checkpoint(offset=7)
