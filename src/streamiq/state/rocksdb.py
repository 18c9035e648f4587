"""RocksDB store (``rocksdict``): one database per view per node.

Layout: ``b"d" + partition(2 bytes) + key`` for rows and ``b"m" + partition`` for the
partition's checkpoint (JSON), so a partition is one contiguous range that can be
scanned in key order or dropped with one range delete. An iterator reads RocksDB's
implicit snapshot, taken when it is created: a scan sees no write made after it began.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path

from rocksdict import Options, Rdict, WriteBatch

from streamiq.state.base import Checkpoint, Store

__all__ = ["RocksDBStore"]

_P = struct.Struct(">H")


def _data(partition: int) -> bytes:
    return b"d" + _P.pack(partition)


def _meta(partition: int) -> bytes:
    return b"m" + _P.pack(partition)


class RocksDBStore(Store):
    def __init__(self, path: Path | str) -> None:
        Path(path).mkdir(parents=True, exist_ok=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        self.path = str(path)
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
        if raw is None:
            return None
        doc = json.loads(raw)
        position = {t: {int(p): int(o) for p, o in po.items()}
                    for t, po in doc.get("position", {}).items()}
        return Checkpoint(offset=int(doc["offset"]), position=position)

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
        partition) and bytes in SST files plus memtables."""
        prop = self._db.property_int_value
        return {"rows": int(prop("rocksdb.estimate-num-keys") or 0),
                "bytes": int((prop("rocksdb.total-sst-files-size") or 0)
                             + (prop("rocksdb.cur-size-all-mem-tables") or 0))}

    def close(self) -> None:
        self._db.close()
