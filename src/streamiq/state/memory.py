"""In-memory store: the ``Store`` contract without a disk, for unit tests and nodes
whose state may be lost.

Nothing survives the process: a node with ``--store memory`` restores every partition
it holds from the changelog topics when it starts, as a node with an empty RocksDB
directory does. Behaviour matches ``RocksDBStore`` (tests/unit/state/test_store_contract.py
runs the same tests over both): keys in unsigned byte order, a batch and its checkpoint
applied atomically, a scan that reads the partition as it was when iteration began.

Per partition a dict holds the rows and a sorted list of the keys serves scans; the
list is kept up to date by small batches and rebuilt on the next scan after a large one.
A scan reads the dict and list in place, without copying them: a write that comes while
a scan is reading copies them first (copy on write), so the scan keeps its version.
"""

from __future__ import annotations

import json
import struct
import threading
from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence
from pathlib import Path

from streamiq.state.base import Checkpoint, Store
from streamiq.state.snapshots import Snapshot, SnapshotError, check_digest, file_digest

__all__ = ["MemoryStore"]

#: ``Snapshot.format`` of this store's snapshots: a JSON header line (partition,
#: checkpoint, rows), then each row as two length-prefixed byte strings, in key order
FORMAT = "memory-1"
_LEN = struct.Struct(">I")

#: a batch adding or removing more keys than this re-sorts the keys on the next scan
#: (an insort moves the list's tail: cheap a few times, slower than a sort many times)
_INSORT_MAX = 256


def _copy(cp: Checkpoint) -> Checkpoint:
    """A checkpoint no caller shares, with ``int`` numbers as RocksDB's JSON gives back."""
    return Checkpoint(offset=int(cp.offset),
                      position={t: {int(p): int(o) for p, o in po.items()}
                                for t, po in cp.position.items()})


class _Rows:
    """One version of a partition's rows. Never changed while scans read it (``readers``):
    a write copies it first."""

    def __init__(self, rows: dict[bytes, bytes], keys: list[bytes] | None) -> None:
        self.rows = rows
        self.keys = keys  # sorted; None: sorted again by the next scan
        self.readers = 0

    def copy(self) -> _Rows:
        return _Rows(dict(self.rows), None if self.keys is None else list(self.keys))

    def sorted_keys(self) -> list[bytes]:
        if self.keys is None:
            self.keys = sorted(self.rows)
        return self.keys

    def resort(self, changed: Sequence[bytes]) -> None:
        """Bring the sorted keys up to date with ``changed`` (added or removed keys)."""
        if self.keys is None or len(changed) > _INSORT_MAX:
            self.keys = None
            return
        for key in changed:
            if key in self.rows:
                insort(self.keys, key)
            else:
                del self.keys[bisect_left(self.keys, key)]


def _read_rows(data: bytes) -> dict[bytes, bytes]:
    """A memory snapshot's rows (after its header line)."""
    rows: dict[bytes, bytes] = {}
    at, end = 0, len(data)
    while at < end:
        parts = []
        for _ in range(2):
            (n,) = _LEN.unpack_from(data, at)
            at += _LEN.size
            if at + n > end:
                raise ValueError("a row cut short")
            parts.append(data[at:at + n])
            at += n
        rows[parts[0]] = parts[1]
    return rows


class _Partition:
    def __init__(self, checkpoint: Checkpoint) -> None:
        self.data = _Rows({}, [])
        self.checkpoint = checkpoint
        self.bytes = 0

    def write(self, puts: Sequence[tuple[bytes, bytes | None]]) -> None:
        if self.data.readers:  # a scan reads this version: it keeps it
            self.data = self.data.copy()
        rows = self.data.rows
        held = {key: key in rows for key, _ in puts}  # before the batch
        for key, value in puts:
            old = rows.pop(key, None) if value is None else rows.get(key)
            if old is not None:
                self.bytes -= len(key) + len(old)
            if value is not None:
                rows[key] = value
                self.bytes += len(key) + len(value)
        self.data.resort([k for k, was in held.items() if (k in rows) != was])


class MemoryStore(Store):
    """A view's rows in this process's memory. Thread-safe: the materializer writes
    from its thread while queries read from others."""

    def __init__(self) -> None:
        self._parts: dict[int, _Partition] = {}
        self._lock = threading.RLock()  # a scan abandoned in a cycle may end in any call

    def get(self, partition: int, key: bytes) -> bytes | None:
        part = self._parts.get(partition)
        return None if part is None else part.data.rows.get(key)  # one dict read: atomic

    def multi_get(self, partition: int, keys: Sequence[bytes]) -> list[bytes | None]:
        with self._lock:
            part = self._parts.get(partition)
            rows = {} if part is None else part.data.rows
            return [rows.get(k) for k in keys]

    def apply(self, partition: int, puts: Sequence[tuple[bytes, bytes | None]],
              checkpoint: Checkpoint) -> None:
        cp = _copy(checkpoint)
        with self._lock:
            part = self._parts.get(partition)
            if part is None:
                part = self._parts[partition] = _Partition(cp)
            part.write(puts)
            part.checkpoint = cp

    def checkpoint(self, partition: int) -> Checkpoint | None:
        part = self._parts.get(partition)
        return None if part is None else _copy(part.checkpoint)

    def scan(self, partition: int, start: bytes | None = None, end: bytes | None = None
             ) -> Iterator[tuple[bytes, bytes]]:
        with self._lock:
            part = self._parts.get(partition)
            if part is None:
                return
            data = part.data  # the rows as they are now: later writes copy them first
            keys = data.sorted_keys()
            data.readers += 1
        try:
            rows = data.rows
            hi = bisect_left(keys, end) if end is not None else len(keys)
            for i in range(bisect_left(keys, start) if start else 0, hi):
                yield keys[i], rows[keys[i]]
        finally:
            with self._lock:
                data.readers -= 1

    def drop(self, partition: int) -> None:
        with self._lock:
            self._parts.pop(partition, None)

    def export(self, partition: int, into: Path) -> Snapshot | None:
        with self._lock:
            part = self._parts.get(partition)
            if part is None:
                return None
            cp, rows = _copy(part.checkpoint), dict(part.data.rows)  # as of now
        head = {"partition": partition, "rows": len(rows),
                "checkpoint": {"offset": cp.offset, "position": cp.position}}
        with open(into, "wb") as f:
            f.write(json.dumps(head).encode() + b"\n")
            for key in sorted(rows):
                value = rows[key]
                f.write(_LEN.pack(len(key)) + key + _LEN.pack(len(value)) + value)
        return Snapshot(FORMAT, partition, into, cp, len(rows), into.stat().st_size,
                        file_digest(into))

    def ingest(self, snapshot: Snapshot) -> Checkpoint:
        check_digest(snapshot, FORMAT)
        try:
            with open(snapshot.path, "rb") as f:
                head = json.loads(f.readline())
                rows = _read_rows(f.read())
            cp = _copy(Checkpoint(offset=head["checkpoint"]["offset"],
                                  position=head["checkpoint"]["position"]))
        except (ValueError, KeyError, TypeError, AttributeError, struct.error) as exc:
            raise SnapshotError(f"not a {FORMAT} snapshot: {exc!r}"[:300]) from None
        if head.get("partition") != snapshot.partition or len(rows) != head.get("rows"):
            raise SnapshotError(f"the file holds partition {head.get('partition')} with "
                                f"{len(rows)} rows, not what it announced")
        if cp != snapshot.checkpoint:
            raise SnapshotError(f"the file's checkpoint {cp} is not the one announced, "
                                f"{snapshot.checkpoint}")
        part = _Partition(cp)
        part.data = _Rows(rows, sorted(rows))
        part.bytes = sum(len(k) + len(v) for k, v in rows.items())
        with self._lock:
            self._parts[snapshot.partition] = part
        snapshot.path.unlink(missing_ok=True)  # taken in, as RocksDB's ingest moves it
        return _copy(cp)

    def stats(self) -> dict[str, int]:
        """Exact: rows held and the bytes of their keys and values (held in memory)."""
        with self._lock:
            parts = list(self._parts.values())
            held = sum(p.bytes for p in parts)
            return {"rows": sum(len(p.data.rows) for p in parts), "bytes": held,
                    "memory": held}

    def close(self) -> None:
        """Free the rows: a closed store holds nothing."""
        with self._lock:
            self._parts = {}
