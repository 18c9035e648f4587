"""Membership topics rotated by time, so heartbeats never pile up on any broker.

A heartbeat matters for a few seconds, but a topic keeps it until retention removes
it (Kafka applies retention only to closed segments, on its own schedule). So
heartbeats go to one topic per *epoch* (why epochs rather than one compacted topic:
docs/design.md, "Membership topics per epoch"):

    _streamiq-<cluster>-members-<epoch>     epoch = floor(unix time / period)

A node publishes to its current epoch's topic and listens to the previous, current and
next epochs' topics, so two nodes whose clocks differ by less than one period always
hear each other (keep node clocks within a period of each other, as NTP does). Each
node creates the next epoch's topic ahead of time and deletes those older than two
epochs back, which no node within that skew still reads or writes. Each topic also
gets ``retention.ms`` of three periods, which bounds it even where a node may not
delete topics. ``--membership-period-s`` sets the period (every node of a cluster must
use the same one).
"""

from __future__ import annotations

import re

__all__ = ["EpochTopics"]


class EpochTopics:
    """Names of a cluster's membership topics, per epoch of ``period_s`` seconds."""

    def __init__(self, base: str, period_s: float) -> None:
        if period_s <= 0:
            raise ValueError(f"membership period must be positive, got {period_s}")
        self.base = base
        self.period_s = period_s
        self._pattern = re.compile(re.escape(base) + r"-(\d+)$")

    def epoch(self, now: float) -> int:
        """The epoch of a wall-clock time (seconds since the Unix epoch)."""
        return int(now // self.period_s)

    def name(self, epoch: int) -> str:
        return f"{self.base}-{epoch}"

    def publish(self, now: float) -> str:
        """The topic a heartbeat sent at ``now`` goes to."""
        return self.name(self.epoch(now))

    def listen(self, now: float) -> list[str]:
        """The topics to read at ``now``: previous, current and next epoch."""
        e = self.epoch(now)
        return [self.name(e - 1), self.name(e), self.name(e + 1)]

    def ahead(self, now: float) -> list[str]:
        """The topics to have created by ``now``: current and next epoch."""
        e = self.epoch(now)
        return [self.name(e), self.name(e + 1)]

    def expired(self, now: float, existing: list[str]) -> list[str]:
        """Of ``existing`` topic names, this cluster's membership topics more than two
        epochs old (nobody within a period's clock skew reads or writes them)."""
        oldest = self.epoch(now) - 2
        out = []
        for t in existing:
            m = self._pattern.match(t)
            if m is not None and int(m.group(1)) < oldest:
                out.append(t)
        return sorted(out)

    def retention_ms(self) -> int:
        """``retention.ms`` for a membership topic (brokers that apply it)."""
        return int(self.period_s * 3 * 1000)
