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


def test_memory_is_bounded_and_lookups_use_a_bloom_filter(tmp_path: Path) -> None:
    """--store-memory-mb: three quarters a block cache holding the index and filter
    blocks too, a quarter two write buffers; a bloom filter per SST file."""
    s = RocksDBStore(tmp_path / "db", memory_mb=64)
    prop = s._db.property_int_value
    assert prop("rocksdb.block-cache-capacity") == 48 << 20
    s.close()
    written = max((tmp_path / "db").glob("OPTIONS-*"))  # the newest
    options = {line.strip() for line in written.read_text().splitlines()}
    assert {"filter_policy=bloomfilter", "cache_index_and_filter_blocks=true",
            "pin_l0_filter_and_index_blocks_in_cache=true", "write_buffer_size=8388608",
            "max_write_buffer_number=2"} <= options
