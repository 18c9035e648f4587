"""One materialised changelog partition's state in memory (it mirrors the partition's
checkpoint in the store): offset, end, input positions, restore progress."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from streamiq.serving.changelog.cuts import History
    from streamiq.serving.changelog.ticks import TickClaims

__all__ = ["CopyProgress", "PartitionState", "Replaying", "RestoreProgress", "Transfer"]


class RestoreProgress(TypedDict):
    """How far a partition's restore from its changelog has come (``/health``'s
    ``restoring``, ``streamiq status``): records and bytes applied since it began, the
    records left to its target, the rate since it began, and the time left at it."""

    records: int
    bytes: int
    remaining: int  # -1 while the changelog's end is not yet known
    elapsed_s: float
    rate: float  # records a second since the restore began
    eta_s: float | None  # None until a rate and the end are known


@dataclass
class PartitionState:
    """In-memory view of one materialised partition (mirrors its checkpoint)."""

    offset: int = 0
    high_watermark: int = -1
    position: dict[str, dict[int, int]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    #: The changelog end seen when restoring began; the restore is complete once the
    #: partition's offset reaches it. A replica still restoring never answers, so a
    #: missing key is never reported "not found".
    target: int = -1
    restored: bool = False
    #: the changelog offset the restore began at (its checkpoint's), and the bytes of the
    #: rows applied since: the restore's progress (``restore_progress``)
    restore_from: int = -1
    restore_bytes: int = 0
    #: A fetch for the partition has answered (a record or its end) since it was
    #: assigned. Until then librdkafka's cached end may be the one it had when the
    #: partition was held before, so neither target nor lag is taken from it.
    fetched: bool = False
    #: store key -> the input positions its stored row reflects (its ``streamiq-pos``
    #: header), for rows stored since the last marker that did not cover them
    #: in the order last written (an OrderedDict: the oldest leave first, in O(1))
    rows: OrderedDict[bytes, bytes] = field(default_factory=OrderedDict)
    #: each aggregation task's newest tick claims in this partition (ticks.py)
    ticks: TickClaims | None = None
    #: each key's recent versions, for reads at one cut (cuts.py; None: a windowed view)
    history: History | None = None

    def __post_init__(self) -> None:
        if self.restore_from < 0:
            self.restore_from = self.offset

    def restore_progress(self, now: float | None = None) -> RestoreProgress | None:
        """The restore's progress; None once restored."""
        if self.restored:
            return None
        elapsed = max((time.monotonic() if now is None else now) - self.started, 1e-9)
        records = max(self.offset - self.restore_from, 0)
        remaining = -1 if self.target < 0 or not self.fetched else max(
            self.target - self.offset, 0)
        rate = records / elapsed
        eta = remaining / rate if rate > 0 and remaining >= 0 else None
        return {"records": records, "bytes": self.restore_bytes, "remaining": remaining,
                "elapsed_s": round(elapsed, 3), "rate": round(rate, 1),
                "eta_s": None if eta is None else round(eta, 1)}

    @property
    def lag(self) -> int:
        """Changelog records not yet applied; -1 while the end is not yet known."""
        return -1 if self.high_watermark < 0 else max(0, self.high_watermark - self.offset)


class CopyProgress(TypedDict):
    """How far a copy from a peer has come (``/health``'s ``restoring``, ``streamiq
    status``): bytes received of the file's size (-1 until its header came), the rate
    since it began (bytes a second) and the time left at it."""

    copying_from: str
    bytes: int
    size: int
    elapsed_s: float
    rate: float
    eta_s: float | None


@dataclass
class Transfer:
    """One copy under way from ``peer``: what ``fetch_snapshot`` has received."""

    peer: str
    size: int = -1
    got: int = 0
    started: float = field(default_factory=time.monotonic)

    def progress(self, now: float | None = None) -> CopyProgress:
        elapsed = max((time.monotonic() if now is None else now) - self.started, 1e-9)
        rate = self.got / elapsed
        left = self.size - self.got if self.size >= 0 else -1
        return {"copying_from": self.peer, "bytes": self.got, "size": self.size,
                "elapsed_s": round(elapsed, 3), "rate": round(rate, 1),
                "eta_s": round(left / rate, 1) if rate > 0 and left >= 0 else None}

    def permil(self) -> int:
        """Thousandths received (0 until the size is known)."""
        return 1000 * self.got // self.size if self.size > 0 else 0


@dataclass
class Replaying:
    """One partition replayed from its changelog in a process of its own
    (``changelog/replayer.py``): the offset it has read up to, of ``end``."""

    end: int
    offset: int = 0
    bytes: int = 0
    started: float = field(default_factory=time.monotonic)

    def progress(self, now: float | None = None) -> RestoreProgress:
        elapsed = max((time.monotonic() if now is None else now) - self.started, 1e-9)
        rate = self.offset / elapsed
        remaining = max(self.end - self.offset, 0)
        return {"records": self.offset, "bytes": self.bytes, "remaining": remaining,
                "elapsed_s": round(elapsed, 3), "rate": round(rate, 1),
                "eta_s": round(remaining / rate, 1) if rate > 0 else None}

    def permil(self) -> int:
        """Thousandths of the changelog read."""
        return 1000 * min(self.offset, self.end) // self.end if self.end > 0 else 0
