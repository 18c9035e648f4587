"""RocksDB store (``rocksdict``): one database per view per node.

Layout: ``b"d" + partition(2 bytes) + key`` for rows and ``b"m" + partition`` for the
partition's checkpoint (JSON), so a partition is one contiguous range that can be
scanned in key order or dropped with one range delete. An iterator reads RocksDB's
implicit snapshot, taken when it is created: a scan sees no write made after it began.

A partition's snapshot (``export``) is an SST file of exactly its range, rows then
checkpoint, written by ``SstFileWriter`` in a child process (``rocksdb_export.py``) from a
RocksDB checkpoint of the store (one moment); ``ingest`` checks it
in a scratch database beside it (first and last keys inside the partition, its checkpoint
the one announced), then drops the partition and ingests the file, which RocksDB links
into its own files: no row is written one by one.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from rocksdict import (
    BlockBasedOptions,
    Cache,
    IngestExternalFileOptions,
    Options,
    Rdict,
    WriteBatch,
)
from rocksdict import Checkpoint as DbCheckpoint

from streamiq.state.base import DEFAULT_MEMORY_MB, Checkpoint, Store
from streamiq.state.snapshots import Snapshot, SnapshotError, check_digest, file_digest

__all__ = ["BLOOM_BITS", "RocksDBStore"]

_P = struct.Struct(">H")
#: ``Snapshot.format`` of this store's snapshots
FORMAT = "rocksdb-sst-1"
#: ``rocksdb_export.py``'s exit status for a partition the store never held
NEVER_HELD = 3
#: bloom filter bits per key: about 1% of lookups of an absent key read a data block
BLOOM_BITS = 10


def _data(partition: int) -> bytes:
    return b"d" + _P.pack(partition)


def _meta(partition: int) -> bytes:
    return b"m" + _P.pack(partition)


def options(memory_mb: int) -> Options:
    """A store's options within ``memory_mb``: three quarters a block cache that also
    holds the index and bloom filter blocks (so they count, and 10M keys' filters take
    about 12 MB of it), a quarter two write buffers. A lookup of a key reads one data
    block at most, none for most absent keys (the bloom filter)."""
    budget = memory_mb << 20
    table = BlockBasedOptions()
    table.set_block_cache(Cache(budget * 3 // 4))
    table.set_bloom_filter(BLOOM_BITS, False)  # a full filter per SST file
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_block_based_table_factory(table)
    opts.set_write_buffer_size(budget // 8)
    opts.set_max_write_buffer_number(2)
    return opts


class RocksDBStore(Store):
    def __init__(self, path: Path | str, memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        opts = options(memory_mb)
        self.path = str(path)
        self._opts = opts
        self._db = Rdict(self.path, opts)

    def get(self, partition: int, key: bytes) -> bytes | None:
        value: bytes | None = self._db.get(_data(partition) + key)
        return value

    def multi_get(self, partition: int, keys: Sequence[bytes]) -> list[bytes | None]:
        prefix = _data(partition)
        values: list[bytes | None] = list(self._db.get([prefix + k for k in keys]) or [])
        return values

    def apply(self, partition: int, puts: Sequence[tuple[bytes, bytes | None]],
              checkpoint: Checkpoint) -> None:
        prefix = _data(partition)
        wb = WriteBatch(raw_mode=True)
        for key, value in puts:
            if value is None:
                wb.delete(prefix + key)
            else:
                wb.put(prefix + key, value)
        wb.put(_meta(partition), json.dumps(
            {"offset": checkpoint.offset, "position": checkpoint.position}).encode())
        self._db.write(wb)

    def checkpoint(self, partition: int) -> Checkpoint | None:
        raw = self._db.get(_meta(partition))
        return None if raw is None else _checkpoint(raw)

    def export(self, partition: int, into: Path) -> Snapshot | None:
        """A RocksDB checkpoint of the whole store (hard links to its files: one
        moment, made in milliseconds) from which a child process writes the partition's
        file (``rocksdb_export.py``), so the export holds none of this process's
        interpreter; the checkpoint is removed after."""
        if self._db.get(_meta(partition)) is None:
            return None  # never held
        at = into.with_name(into.name + ".at")
        shutil.rmtree(at, ignore_errors=True)
        try:
            DbCheckpoint(self._db).create_checkpoint(str(at))
            done = subprocess.run(
                [sys.executable, "-m", "streamiq.state.rocksdb_export", str(at),
                 str(partition), str(into)], capture_output=True, text=True, check=False)
        finally:
            shutil.rmtree(at, ignore_errors=True)
        if done.returncode == NEVER_HELD:
            return None
        if done.returncode != 0:
            into.unlink(missing_ok=True)
            raise SnapshotError(f"the export of partition {partition} failed (exit "
                                f"{done.returncode}): {done.stderr.strip()[-500:]}")
        out = json.loads(done.stdout)
        return Snapshot(FORMAT, partition, into, _checkpoint(out["checkpoint"].encode()),
                        int(out["rows"]), into.stat().st_size, file_digest(into))

    def ingest(self, snapshot: Snapshot) -> Checkpoint:
        check_digest(snapshot, FORMAT)
        p = snapshot.partition
        checkpoint = self._verify(snapshot)
        self._db.delete_range(_data(p), _data(p + 1))
        self._db.delete(_meta(p))
        opts = IngestExternalFileOptions()
        opts.set_move_files(True)  # linked into the database, not copied
        self._db.ingest_external_file([str(snapshot.path)], opts)
        return checkpoint

    def _verify(self, snapshot: Snapshot) -> Checkpoint:
        """The snapshot's checkpoint, once a scratch database holding the file shows
        every key inside its partition; ``SnapshotError`` otherwise."""
        p = snapshot.partition
        scratch = snapshot.path.with_name(snapshot.path.name + ".check")
        shutil.rmtree(scratch, ignore_errors=True)
        db = Rdict(str(scratch), self._opts)
        try:
            try:
                db.ingest_external_file([str(snapshot.path)], IngestExternalFileOptions())
            except Exception as exc:  # RocksDB's own word: not an SST, a bad block
                raise SnapshotError(f"not a readable SST file: {exc}") from None
            first = next(iter(db.keys()), None)
            last = next(iter(db.keys(backwards=True)), None)
            if not isinstance(first, bytes) or first < _data(p) or last != _meta(p):
                raise SnapshotError(f"keys outside partition {p}: {first!r} .. {last!r}")
            after = next(iter(db.keys(from_key=_data(p + 1))), None)
            if after != _meta(p):
                raise SnapshotError(f"keys outside partition {p}: {after!r}")
            raw = db.get(_meta(p))
            if not isinstance(raw, bytes):
                raise SnapshotError(f"no checkpoint of partition {p} in the file")
            checkpoint = _checkpoint(raw)
        finally:
            db.close()
            Rdict.destroy(str(scratch))
            shutil.rmtree(scratch, ignore_errors=True)
        if checkpoint != snapshot.checkpoint:
            raise SnapshotError(f"the file's checkpoint {checkpoint} is not the one "
                                f"announced, {snapshot.checkpoint}")
        return checkpoint

    def scan(self, partition: int, start: bytes | None = None, end: bytes | None = None
             ) -> Iterator[tuple[bytes, bytes]]:
        prefix = _data(partition)
        lo = prefix + (start or b"")
        hi = prefix + end if end is not None else _data(partition + 1)
        it = self._db.iter()
        it.seek(lo)
        n = len(prefix)
        while it.valid():
            k = it.key()
            if k >= hi:
                break
            yield k[n:], it.value()
            it.next()

    def drop(self, partition: int) -> None:
        self._db.delete_range(_data(partition), _data(partition + 1))
        self._db.delete(_meta(partition))

    def stats(self) -> dict[str, int]:
        """RocksDB's own estimates: keys (checkpoint entries included, one per
        partition), bytes in SST files plus memtables, and memory (the block cache's
        use, memtables, and the table readers' index and filter blocks outside it)."""
        prop = self._db.property_int_value

        def n(name: str) -> int:
            return int(prop(f"rocksdb.{name}") or 0)

        tables = n("cur-size-all-mem-tables")
        return {"rows": n("estimate-num-keys"), "bytes": n("total-sst-files-size") + tables,
                "memory": n("block-cache-usage") + tables + n("estimate-table-readers-mem")}

    def close(self) -> None:
        self._db.close()


def _checkpoint(raw: bytes) -> Checkpoint:
    doc = json.loads(raw)
    position = {t: {int(p): int(o) for p, o in po.items()}
                for t, po in doc.get("position", {}).items()}
    return Checkpoint(offset=int(doc["offset"]), position=position)
