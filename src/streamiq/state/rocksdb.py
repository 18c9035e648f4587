"""RocksDB store (``rocksdict``): one database per partition of a view on a node.

Layout: the view's folder holds a folder per partition, ``p<partition>-<id>``, each a
RocksDB database of ``b"d" + key`` rows and one ``b"m"`` entry, the partition's
checkpoint (JSON: next changelog offset, input position, the partition), written in the
same batch as the rows. The databases of a view share one block cache and one write
buffer manager, so ``--store-memory-mb`` bounds the view whatever the partitions held.
An iterator reads RocksDB's implicit snapshot, taken when it is created: a scan sees no
write made after it began.

A partition's database is what moves between nodes (issue 49): ``export`` makes a
RocksDB checkpoint of it (hard links to its files as of one moment) and packs the
folder into one tar file, with no row read or written one by one; ``ingest`` unpacks a
file into a folder of its own, opens it and checks its checkpoint (this partition, the
one announced), and only then puts it in place of the partition's database. So copying
a partition costs what copying its files costs, at any number of keys.

A dropped or replaced database is marked (a ``DROPPED`` file) and closed and deleted
after ``RETIRE_S``: a read that found it just before goes on reading it. A start deletes
the marked ones and any folder left half-received. A store of the layout before
(one database for the view, rows prefixed by partition) is moved into this one when it
is opened (``rocksdb_layout.py``).
"""

from __future__ import annotations

import json
import shutil
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import orjson
from rocksdict import (
    AccessType,
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    WriteBatch,
    WriteBufferManager,
)
from rocksdict import Checkpoint as DbCheckpoint

from streamiq.state.base import DEFAULT_MEMORY_MB, Checkpoint, Store
from streamiq.state.rocksdb_layout import DROPPED, INCOMING, META, ROW, clean, folder, migrate
from streamiq.state.snapshots import Snapshot, SnapshotError, check_digest, file_digest

__all__ = ["BLOOM_BITS", "FORMAT", "RETIRE_S", "RocksDBStore"]

#: ``Snapshot.format`` of this store's snapshots: a partition's database folder, tarred
FORMAT = "rocksdb-db-1"
#: bloom filter bits per key: about 1% of lookups of an absent key read a data block
BLOOM_BITS = 10
#: how long a dropped or replaced database stays open for the reads that found it
RETIRE_S = 30.0
#: files a snapshot's tar may hold (a partition's database: a few per level)
_MAX_FILES = 100_000
_COPY_BUF = 1 << 20


def options(memory_mb: int) -> Options:
    """Options within ``memory_mb`` for all the databases they open: three quarters a
    block cache that also holds the index and bloom filter partitions (so they count,
    and 10M keys' filters take about 12 MB of it), a quarter the write buffers (a write
    buffer manager over every partition's memtables). A lookup of a key reads one data
    block at most, none for most absent keys (the bloom filter)."""
    budget = memory_mb << 20
    table = BlockBasedOptions()
    table.set_block_cache(Cache(budget * 3 // 4))
    table.set_bloom_filter(BLOOM_BITS, False)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    # index and filter in 4 KB partitions, cached like data blocks, their top levels
    # pinned: whole blocks per file (a 60 MB file's filter is 2 MB) were evicted by the
    # data blocks and read again, 390 us of CPU a lookup at 10M keys against 11 us
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_pin_top_level_index_and_filter(True)
    table.set_metadata_block_size(4096)
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.set_block_based_table_factory(table)
    opts.set_write_buffer_manager(WriteBufferManager(budget // 4, False))
    opts.set_write_buffer_size(budget // 8)
    opts.set_max_write_buffer_number(2)
    return opts


def _meta(partition: int, checkpoint: Checkpoint) -> bytes:
    """The checkpoint written with each batch (orjson: 1.1 us where json.dumps took 7;
    every batch a node applies pays it, a row at a time when writes trickle in). The
    position's partitions become strings, as json.dumps made them: stores written
    before read the same."""
    return orjson.dumps({"offset": checkpoint.offset, "position": checkpoint.position,
                         "partition": partition}, option=orjson.OPT_NON_STR_KEYS)


class RocksDBStore(Store):
    def __init__(self, path: Path | str, memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        self.root = Path(path)
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = str(path)
        self._opts = options(memory_mb)
        self._lock = threading.Lock()  # opening, dropping and replacing databases
        self._dbs: dict[int, tuple[Rdict, Path]] = {}
        self._retired: list[tuple[float, Rdict, Path]] = []
        migrate(self.root, self._opts)
        for p, found in clean(self.root).items():
            self._dbs[p] = (Rdict(str(found), self._opts), found)

    def _db(self, partition: int) -> Rdict | None:
        held = self._dbs.get(partition)
        return None if held is None else held[0]

    def _writable(self, partition: int) -> Rdict:
        db = self._db(partition)
        if db is not None:
            return db
        with self._lock:
            if partition not in self._dbs:
                new = folder(self.root, partition)
                self._dbs[partition] = (Rdict(str(new), self._opts), new)
            return self._dbs[partition][0]

    def get(self, partition: int, key: bytes) -> bytes | None:
        db = self._db(partition)
        value: bytes | None = None if db is None else db.get(ROW + key)
        return value

    def multi_get(self, partition: int, keys: Sequence[bytes]) -> list[bytes | None]:
        db = self._db(partition)
        if db is None:
            return [None] * len(keys)
        return list(db.get([ROW + k for k in keys]) or [])

    def apply(self, partition: int, puts: Sequence[tuple[bytes, bytes | None]],
              checkpoint: Checkpoint) -> None:
        db = self._writable(partition)
        wb = WriteBatch(raw_mode=True)
        for key, value in puts:
            if value is None:
                wb.delete(ROW + key)
            else:
                wb.put(ROW + key, value)
        wb.put(META, _meta(partition, checkpoint))
        db.write(wb)
        if self._retired:
            self._sweep()

    def checkpoint(self, partition: int) -> Checkpoint | None:
        db = self._db(partition)
        raw = None if db is None else db.get(META)
        return None if raw is None else _checkpoint(raw)

    def scan(self, partition: int, start: bytes | None = None, end: bytes | None = None
             ) -> Iterator[tuple[bytes, bytes]]:
        db = self._db(partition)
        if db is None:
            return
        hi = ROW + end if end is not None else META
        it = db.iter()
        it.seek(ROW + (start or b""))
        while it.valid():
            k = it.key()
            if k >= hi:
                break
            yield k[1:], it.value()
            it.next()

    def drop(self, partition: int) -> None:
        with self._lock:
            held = self._dbs.pop(partition, None)
            if held is not None:
                self._retire(*held)
        self._sweep()

    def _retire(self, db: Rdict, path: Path) -> None:
        """Marked now (a start deletes it), closed and deleted after RETIRE_S."""
        (path / DROPPED).touch()
        self._retired.append((time.monotonic(), db, path))

    def _sweep(self, everything: bool = False) -> None:
        now = time.monotonic()
        with self._lock:
            due = [r for r in self._retired if everything or now - r[0] >= RETIRE_S]
            self._retired = [r for r in self._retired if r not in due]
        for _, db, path in due:
            db.close()
            shutil.rmtree(path, ignore_errors=True)

    def export(self, partition: int, into: Path) -> Snapshot | None:
        """A RocksDB checkpoint of the partition's database (hard links: one moment,
        made in milliseconds), packed into the tar file ``into``; the checkpoint's
        folder is removed after. The rows counted are RocksDB's estimate."""
        db = self._db(partition)
        if db is None or db.get(META) is None:
            return None  # never held
        at = into.with_name(into.name + ".at")
        shutil.rmtree(at, ignore_errors=True)
        try:
            DbCheckpoint(db).create_checkpoint(str(at))
            copy = Rdict(str(at), self._opts, access_type=AccessType.read_only())
            try:
                raw, rows = copy.get(META), copy.property_int_value("rocksdb.estimate-num-keys")
            finally:
                copy.close()
            with tarfile.TarFile(into, "w", copybufsize=_COPY_BUF) as tar:
                for f in sorted(at.iterdir()):
                    tar.add(f, arcname=f.name, recursive=False)
        finally:
            shutil.rmtree(at, ignore_errors=True)
        assert isinstance(raw, bytes)  # written with every batch
        return Snapshot(FORMAT, partition, into, _checkpoint(raw), max(int(rows or 0) - 1, 0),
                        into.stat().st_size, file_digest(into))

    def ingest(self, snapshot: Snapshot) -> Checkpoint:
        check_digest(snapshot, FORMAT)
        p = snapshot.partition
        name = uuid.uuid4().hex[:12]
        incoming = self.root / f"{INCOMING}{name}"
        try:
            checkpoint = self._unpack(snapshot, incoming)
            placed = folder(self.root, p, name)
            incoming.rename(placed)
        finally:
            shutil.rmtree(incoming, ignore_errors=True)
            snapshot.path.unlink(missing_ok=True)
        db = Rdict(str(placed), self._opts)
        with self._lock:
            old = self._dbs.get(p)
            self._dbs[p] = (db, placed)
            if old is not None:
                self._retire(*old)
        return checkpoint

    def _unpack(self, snapshot: Snapshot, into: Path) -> Checkpoint:
        """The snapshot's files in ``into`` (flat regular files only), opened as a
        database whose checkpoint is the one announced, of its partition; else
        ``SnapshotError``."""
        try:
            with tarfile.open(snapshot.path, "r:") as tar:
                members = tar.getmembers()
                if len(members) > _MAX_FILES or any(
                        not m.isfile() or "/" in m.name or m.name in ("", ".", "..")
                        for m in members):
                    raise SnapshotError("not a database folder: files other than flat "
                                        "regular files")
                tar.extractall(into, filter="data")
        except (tarfile.TarError, OSError) as exc:
            raise SnapshotError(f"not a readable snapshot: {exc}") from None
        try:
            db = Rdict(str(into), self._opts, access_type=AccessType.read_only())
        except Exception as exc:  # RocksDB's own word: no database, a corrupt manifest
            raise SnapshotError(f"not a readable database: {str(exc)[:200]}") from None
        try:
            raw = db.get(META)
            first = next(iter(db.keys()), None)
            last = next(iter(db.keys(backwards=True)), None)
        finally:
            db.close()
        if not isinstance(raw, bytes):
            raise SnapshotError("no checkpoint in the snapshot")
        if last != META or not isinstance(first, bytes) or not first.startswith((ROW, META)):
            raise SnapshotError(f"keys that are not rows: {first!r} .. {last!r}")
        held = json.loads(raw).get("partition")
        if held != snapshot.partition:
            raise SnapshotError(f"a snapshot of partition {held}, announced as partition "
                                f"{snapshot.partition}")
        checkpoint = _checkpoint(raw)
        if checkpoint != snapshot.checkpoint:
            raise SnapshotError(f"the file's checkpoint {checkpoint} is not the one "
                                f"announced, {snapshot.checkpoint}")
        return checkpoint

    def stats(self) -> dict[str, int]:
        """RocksDB's own estimates over the partitions' databases: keys (rows), bytes in
        SST files plus memtables, and memory (the shared block cache's use, memtables,
        and the table readers' index and filter blocks outside it)."""
        dbs = [db for db, _ in list(self._dbs.values())]
        rows = size = memory = 0
        for db in dbs:
            tables = _prop(db, "cur-size-all-mem-tables")
            rows += max(_prop(db, "estimate-num-keys") - 1, 0)  # its checkpoint entry
            size += _prop(db, "total-sst-files-size") + tables
            memory += tables + _prop(db, "estimate-table-readers-mem")
        if dbs:  # one cache, shared
            memory += _prop(dbs[0], "block-cache-usage")
        return {"rows": rows, "bytes": size, "memory": memory}

    def close(self) -> None:
        self._sweep(everything=True)
        with self._lock:
            held, self._dbs = list(self._dbs.values()), {}
        for db, _ in held:
            db.close()


def _prop(db: Rdict, name: str) -> int:
    return int(db.property_int_value(f"rocksdb.{name}") or 0)


def _checkpoint(raw: bytes) -> Checkpoint:
    doc = json.loads(raw)
    position = {t: {int(p): int(o) for p, o in po.items()}
                for t, po in doc.get("position", {}).items()}
    return Checkpoint(offset=int(doc["offset"]), position=position)
