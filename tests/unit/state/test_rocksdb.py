"""What only RocksDB does: its rows outlive the process. The behaviour every store
shares is tested over RocksDB and memory alike in test_store_contract.py."""

from __future__ import annotations

from pathlib import Path

from streamiq.state.base import Checkpoint
from streamiq.state.rocksdb import RocksDBStore


def test_survives_reopen(tmp_path: Path) -> None:
    s = RocksDBStore(tmp_path / "db")
    s.apply(0, [(b"k", b"v")], Checkpoint(offset=7))
    s.close()
    s2 = RocksDBStore(tmp_path / "db")
    assert s2.get(0, b"k") == b"v" and s2.checkpoint(0) == Checkpoint(offset=7)
