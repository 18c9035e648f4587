"""When a request to a peer is also sent to the next replica: hedge delays from measured
latency, the peers found slow, and the hedges counted.

"The Tail at Scale" (Dean and Barroso): a request whose replica has not answered by the
95th percentile of that kind of request's latency is also sent to another replica, and
the first answer wins. Here latency is measured per peer and per kind of request (a
lookup is not an aggregate): the 95th percentile of each peer's last ``WINDOW`` answers.
The delay for a kind is the best of those percentiles (what a healthy replica takes: a
peer behind a slow link does not teach the node to wait for it), never under
``FLOOR_S`` (so nothing is hedged while nothing is slow: a healthy forwarded lookup
takes about a millisecond here, and a loaded shared machine's hiccups stay under the
floor) and never over the kind's cap (so a peer that turned slow, or stopped, costs a
one-partition request at most ``ONE_CAP_S`` before another replica is asked). A peer
that lost a race is suspect for ``SUSPECT_S``: placement asks it last, so a peer behind
a slow link or in a long pause costs at most one hedge delay per period instead of one
per request; membership (which removes a member only when it stops heartbeating or
refuses a connection) is left alone, since suspecting a slow member there would move
partitions.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

__all__ = ["FLOOR_S", "GATHER_CAP_S", "ONE_CAP_S", "SUSPECT_S", "WINDOW", "Hedging", "Tracker"]

FLOOR_S = 0.02
ONE_CAP_S = 0.1  # lookups, a key's windows: the most a slow replica costs one of them
GATHER_CAP_S = 1.0  # a part of a scatter-gather (its own work can take long)
SUSPECT_S = 1.0
WINDOW = 128  # answers kept per peer and kind
_EVERY = 32  # the percentile is recomputed every this many answers


class Tracker:
    """The last ``WINDOW`` latencies of one kind of request to one peer, and their 95th
    percentile (recomputed every ``_EVERY`` answers: the hot path appends only)."""

    __slots__ = ("_at", "_n", "_samples", "p95")

    def __init__(self) -> None:
        self._samples = [0.0] * WINDOW
        self._n = 0
        self._at = 0
        self.p95 = 0.0

    def add(self, seconds: float) -> None:
        self._samples[self._at] = seconds
        self._at = (self._at + 1) % WINDOW
        self._n += 1
        if self._n % _EVERY == 0 or self._n == 8:
            seen = sorted(self._samples[:min(self._n, WINDOW)])
            self.p95 = seen[int(len(seen) * 0.95)]


@dataclass
class Hedging:
    """This node's hedge delays, suspects and counts."""

    sent: dict[str, int] = field(default_factory=dict)  # hedges sent, per kind
    won: dict[str, int] = field(default_factory=dict)  # hedges that answered first
    _trackers: dict[tuple[str, str], Tracker] = field(default_factory=dict)
    _best: dict[str, float] = field(default_factory=dict)  # kind -> the best peer's p95
    _suspects: dict[str, float] = field(default_factory=dict)  # peer -> until when

    def delay(self, address: str, kind: str, gather: bool = False) -> float:
        """Seconds to wait for ``address`` before asking another replica too: the best
        peer's 95th percentile for ``kind``, within the floor and the kind's cap."""
        return min(GATHER_CAP_S if gather else ONE_CAP_S,
                   max(FLOOR_S, self._best.get(kind, 0.0)))

    def observe(self, address: str, kind: str, seconds: float) -> None:
        """A reply from ``address`` after ``seconds``."""
        t = self._trackers.get((address, kind))
        if t is None:
            t = self._trackers[(address, kind)] = Tracker()
        before = t.p95
        t.add(seconds)
        if t.p95 != before:  # recomputed: the kind's best again (a few peers); 0 when
            # every answer took under the clock's tick (uvloop's is 1 ms): the floor
            self._best[kind] = min((x.p95 for (_, k), x in self._trackers.items()
                                    if k == kind and x.p95 > 0), default=0.0)

    def hedged(self, kind: str, slow: str) -> None:
        """A hedge was sent for a request ``slow`` had not answered: it is suspect."""
        self.sent[kind] = self.sent.get(kind, 0) + 1
        self._suspects[slow] = time.monotonic() + SUSPECT_S

    def hedge_won(self, kind: str) -> None:
        self.won[kind] = self.won.get(kind, 0) + 1

    def suspect(self, address: str) -> bool:
        """``address`` lost a race within the last ``SUSPECT_S``: ask it last."""
        until = self._suspects.get(address)
        if until is None:
            return False
        if time.monotonic() < until:
            return True
        del self._suspects[address]
        return False

    def totals(self) -> dict[str, object]:
        """For ``/health`` and ``/metrics``."""
        return {"sent": dict(self.sent), "won": dict(self.won),
                "suspects": sorted(a for a in list(self._suspects) if self.suspect(a))}
