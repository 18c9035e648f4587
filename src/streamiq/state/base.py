"""The serving store interface. Implementations depend only on this module.

A store holds one view's rows for the changelog partitions a node materialises.
Rows and the changelog position they reflect are written in one atomic batch, so
a restarted node resumes from exactly where its data is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

__all__ = ["DEFAULT_MEMORY_MB", "Checkpoint", "Reader", "Snapshot", "SnapshotError", "Store",
           "StoreKind"]

#: the stores ``streamiq.state.open_store`` opens (the ``store`` setting)
StoreKind = Literal["rocksdb", "memory"]
#: ``--store-memory-mb``'s default: the memory of a view's store on one node (MiB)
DEFAULT_MEMORY_MB = 256


@dataclass
class Checkpoint:
    """Where a partition's data stands: next changelog offset, input offsets reflected."""

    offset: int = 0
    position: dict[str, dict[int, int]] = field(default_factory=dict)


class SnapshotError(Exception):
    """A snapshot that cannot be taken in: corrupt, cut short, of another partition or
    store kind. The partition is left as it was."""


@dataclass(frozen=True)
class Snapshot:
    """One partition of a store in a file (``Store.export``)."""

    #: the file's layout: a store takes in only its own (``rocksdb-db-1``, ``memory-1``)
    format: str
    partition: int
    path: Path
    checkpoint: Checkpoint
    #: rows held (RocksDB's estimate for a RocksDB store: counting them would read each)
    rows: int
    size: int
    sha256: str

    def described(self) -> dict[str, Any]:
        """What a receiver needs besides the file (a copy's header, a replayer's last
        line): JSON-ready once its position's partitions become strings."""
        cp = self.checkpoint
        return {"format": self.format, "partition": self.partition,
                "checkpoint": {"offset": cp.offset, "position": cp.position},
                "rows": self.rows, "size": self.size, "sha256": self.sha256}

    @classmethod
    def of(cls, doc: Any, path: Path) -> Snapshot:
        """The snapshot ``doc`` (``described()`` read back from JSON) says ``path``
        holds; ``SnapshotError`` when it is not such a description."""
        try:
            cp = doc["checkpoint"]
            position = {str(t): {int(p): int(o) for p, o in po.items()}
                        for t, po in cp["position"].items()}
            return cls(str(doc["format"]), int(doc["partition"]), path,
                       Checkpoint(offset=int(cp["offset"]), position=position),
                       int(doc["rows"]), int(doc["size"]), str(doc["sha256"]))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise SnapshotError(f"not a snapshot's description: {exc!r}"[:200]) from None


class Reader(Protocol):
    """The reads a query makes of a view's rows (a ``Store``, or one seen at a cut of
    the input: ``serving/query/atcut.py``)."""

    def get(self, partition: int, key: bytes) -> bytes | None: ...

    def multi_get(self, partition: int, keys: Sequence[bytes]) -> list[bytes | None]:
        """The values of ``keys`` in their order (None where absent), as of one moment."""
        ...

    def scan(self, partition: int, start: bytes | None = None, end: bytes | None = None
             ) -> Iterator[tuple[bytes, bytes]]:
        """Rows with start <= key < end, in key order, as they were when iteration
        began (writes made while iterating are not seen)."""
        ...


class Store(Reader, Protocol):
    """Key-value rows of one view, partitioned like its changelog.

    A ``Protocol``, not a base class: the implementations share no code (each keeps
    rows, order and checkpoints its own way), so a store is anything with these
    methods, and a test can hand a node any object that has them. These are exactly
    the calls the serving tier makes on a store. Keys compare as unsigned bytes
    (RocksDB's default order, and Python's ``bytes`` order).
    """

    def apply(self, partition: int, puts: Sequence[tuple[bytes, bytes | None]],
              checkpoint: Checkpoint) -> None:
        """Atomically write rows (None value deletes) together with the checkpoint."""
        ...

    def checkpoint(self, partition: int) -> Checkpoint | None:
        """The stored checkpoint of a partition, None if the store never held it."""
        ...

    def drop(self, partition: int) -> None:
        """Forget a partition's rows and checkpoint."""
        ...

    def export(self, partition: int, into: Path) -> Snapshot | None:
        """Write the partition, rows and checkpoint as of one moment, to the file
        ``into`` (``state/snapshots.py``); None if the store never held it."""
        ...

    def ingest(self, snapshot: Snapshot) -> Checkpoint:
        """Replace the snapshot's partition with it, once it checks out (its file is
        taken: moved into the store or removed); its checkpoint. ``SnapshotError`` for
        one that does not, the partition left as it was."""
        ...

    def stats(self) -> dict[str, int]:
        """``rows`` and ``bytes`` held, and the ``memory`` the store takes (estimates
        are fine: they are read by /metrics)."""
        ...

    def close(self) -> None: ...
