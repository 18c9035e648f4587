"""The serving store interface. Implementations depend only on this module.

A store holds one view's rows for the changelog partitions a node materialises.
Rows and the changelog position they reflect are written in one atomic batch, so
a restarted node resumes from exactly where its data is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

__all__ = ["Checkpoint", "Store"]


@dataclass
class Checkpoint:
    """Where a partition's data stands: next changelog offset, input offsets reflected."""

    offset: int = 0
    position: dict[str, dict[int, int]] = field(default_factory=dict)


class Store(ABC):
    """Key-value rows of one view, partitioned like its changelog."""

    @abstractmethod
    def get(self, partition: int, key: bytes) -> bytes | None: ...

    @abstractmethod
    def multi_get(self, partition: int, keys: Sequence[bytes]) -> list[bytes | None]: ...

    @abstractmethod
    def apply(self, partition: int, puts: Sequence[tuple[bytes, bytes | None]],
              checkpoint: Checkpoint) -> None:
        """Atomically write rows (None value deletes) together with the checkpoint."""

    @abstractmethod
    def checkpoint(self, partition: int) -> Checkpoint | None:
        """The stored checkpoint of a partition, None if the store never held it."""

    @abstractmethod
    def scan(self, partition: int, start: bytes | None = None, end: bytes | None = None
             ) -> Iterator[tuple[bytes, bytes]]:
        """Rows with start <= key < end, in key order."""

    @abstractmethod
    def drop(self, partition: int) -> None:
        """Forget a partition's rows and checkpoint."""

    @abstractmethod
    def partitions(self) -> list[int]: ...

    @abstractmethod
    def close(self) -> None: ...

    def stats(self) -> dict[str, int]:
        """``rows`` and ``bytes`` held (estimates are fine: they are read by /metrics)."""
        return {"rows": 0, "bytes": 0}
