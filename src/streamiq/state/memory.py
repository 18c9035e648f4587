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

import threading
from bisect import bisect_left, insort
from collections.abc import Iterator, Sequence

from streamiq.state.base import Checkpoint, Store

__all__ = ["MemoryStore"]

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

    def stats(self) -> dict[str, int]:
        """Exact: rows held and the bytes of their keys and values."""
        with self._lock:
            parts = list(self._parts.values())
            return {"rows": sum(len(p.data.rows) for p in parts),
                    "bytes": sum(p.bytes for p in parts)}

    def close(self) -> None:
        """Free the rows: a closed store holds nothing."""
        with self._lock:
            self._parts = {}
