"""One materialised changelog partition's state in memory (it mirrors the partition's
checkpoint in the store): offset, end, input positions, restore progress."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streamiq.serving.changelog.cuts import History
    from streamiq.serving.changelog.ticks import TickClaims

__all__ = ["PartitionState"]


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

    @property
    def lag(self) -> int:
        """Changelog records not yet applied; -1 while the end is not yet known."""
        return -1 if self.high_watermark < 0 else max(0, self.high_watermark - self.offset)
