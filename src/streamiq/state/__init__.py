"""Serving stores: the ``Store`` protocol, its implementations and ``open_store``.

``rocksdb`` (the default, ``state/rocksdb.py``) keeps a view's rows on disk under the
node's state directory and resumes from them after a restart; ``memory``
(``state/memory.py``) keeps them in the process, so a restarted node restores everything
from the changelog (unit tests use it too).
"""

from __future__ import annotations

from pathlib import Path
from typing import get_args

from streamiq.state.base import (
    DEFAULT_MEMORY_MB,
    Checkpoint,
    Snapshot,
    SnapshotError,
    Store,
    StoreKind,
)
from streamiq.state.memory import MemoryStore

__all__ = ["KINDS", "Checkpoint", "MemoryStore", "Snapshot", "SnapshotError", "Store",
           "StoreKind", "open_store"]

#: every kind ``open_store`` opens
KINDS: tuple[StoreKind, ...] = get_args(StoreKind)


def open_store(kind: StoreKind, path: Path | str,
               memory_mb: int = DEFAULT_MEMORY_MB) -> Store:
    """A view's store of ``kind`` at ``path`` (a directory; ``memory`` ignores it and
    creates nothing), RocksDB's within ``memory_mb`` (``--store-memory-mb``).
    ``ValueError`` for a kind there is not."""
    if kind == "rocksdb":
        # imported here: every part reads StoreKind (config.py), only nodes need rocksdict
        from streamiq.state.rocksdb import RocksDBStore

        return RocksDBStore(path, memory_mb)
    if kind == "memory":
        return MemoryStore()
    raise ValueError(f"unknown store {kind!r}: expected one of {', '.join(KINDS)}")
