"""Reads at one cut of the input: each key's value as of exactly the input records up to
one position vector, across every partition (``consistent=true``; issue 46).

A *cut* is a position vector over the view's input partitions, offsets inclusive: the
records at or before them, no more, no less. The entry chooses it: one its partitions
already reflect, covering a tick written moments ago (``Node.settled_cut``), or the
offsets of ticks it writes to every input partition (``Node.recent_input``), past every
record appended before the read. Once a changelog partition's position reflects a cut
it has folded every record of it (``ticks.py``). It may also have folded records past the
cut: a :class:`History` per changelog partition keeps each key's recent versions, so a
read takes, per key, the version that folded exactly the cut's records.

* **Versions.** A row of a view whose aggregation the pipeline builds names, per input
  partition, the newest record it folded (``streamiq-pos``). In real-time mode the
  aggregation writes a row for every record it folds (measured: 2,000 records to one key
  in 0.4 s made 2,000 rows, each one more), so consecutive versions of a key differ by
  one record, the one whose partition advanced. The version at cut C is the newest whose
  positions are all within C; the key's value *before* its first kept version (read from
  the store when the key's chain starts) stands for every older one.
* **Exact, or told so.** A key's records of different input partitions reach its
  aggregation task in any order: a record past the cut (partition a) may be folded
  before one within it (partition b). Then no version of the key holds exactly the cut,
  and :meth:`History.at` raises :class:`~streamiq.errors.CutMoved` naming a lower cut
  that excludes b's record: the entry asks every partition again at the lower cut (a
  lower cut is still complete), so every answer is one exact cut.
* **What is kept.** Versions are recorded before they are stored (a read that finds a
  new row in the store finds its chain), for ``keep_s`` seconds after a key's last change
  and at most ``max_versions`` a partition; a chain dropped raises the partition's
  *floor* (per input partition, one past the newest record a row outside the chains
  folded). A cut below the floor cannot be rebuilt (:meth:`History.check`): the entry
  takes a new cut.
* **Nothing at rest.** Versions are recorded only while consistent reads come (for
  ``ACTIVE_S`` after the last) and once the partition is restored; rows stored
  meanwhile make the floor unknown. A consistent read then starts recording and sets
  the floor to the input's end offsets read after that (:meth:`History.floor_at`):
  its own cut is older, so the entry takes a new one, which holds.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from streamiq.errors import CutMoved
from streamiq.serving.changelog.consistency import Token, row_claims, token_for

__all__ = ["ACTIVE_S", "KEEP_S", "MAX_VERSIONS", "Cut", "History", "cut_of", "cut_token",
           "lower"]

#: how long a key's versions are kept after its last change (s)
KEEP_S = 10.0
#: the most versions kept a partition (the oldest chains go first)
MAX_VERSIONS = 50_000
#: versions are recorded while a consistent read came within this (s); else none are
ACTIVE_S = 60.0

#: (input topic, partition) -> offset, inclusive
Cut = dict[tuple[str, int], int]
_Claims = dict[tuple[str, int], int]


def cut_of(tokens: Iterable[Token]) -> Cut:
    """Tokens as a cut (the newest offset where a partition is named twice)."""
    cut: Cut = {}
    for t, p, o in tokens:
        cut[(t, p)] = max(o, cut.get((t, p), -1))
    return cut


def cut_token(cut: Mapping[tuple[str, int], int]) -> str:
    """The cut as a position token (``topic:partition:offset,...``, sorted)."""
    return ",".join(token_for(t, p, o) for (t, p), o in sorted(cut.items()))


def lower(cut: Mapping[tuple[str, int], int], to: Mapping[tuple[str, int], int]) -> Cut:
    """``cut`` with each partition ``to`` names lowered to at most its offset."""
    return {tp: min(o, to.get(tp, o)) for tp, o in cut.items()}


def _claims(raw: bytes) -> _Claims:
    # unreadable positions: within any cut (the row was checked and stored)
    return row_claims(raw) or {}


def _raise(floor: Cut, raw: bytes) -> None:
    """``floor`` past a row's positions."""
    for tp, o in _claims(raw).items():
        if o + 1 > floor.get(tp, 0):
            floor[tp] = o + 1


def _within(claims: _Claims, cut: Cut) -> bool:
    return all(o <= cut.get(tp, -1) for tp, o in claims.items())


def _pick(claims: list[_Claims], cut: Cut) -> tuple[int, Cut]:
    """Of a key's versions (their positions, oldest first): the newest within ``cut``
    (-1: the value before them), and the lowered offsets that would exclude each record
    within the cut folded after one past it (empty: the version is exactly the cut)."""
    i = len(claims) - 1
    while i >= 0 and not _within(claims[i], cut):
        i -= 1
    lowered: Cut = {}
    for j in range(max(i + 1, 1), len(claims)):  # the first step's record is unknown
        prev = claims[j - 1]
        for tp, o in claims[j].items():
            if o > prev.get(tp, -1) and o <= cut.get(tp, -1):  # within, folded after
                lowered[tp] = min(o - 1, lowered.get(tp, o - 1))
    return i, lowered


@dataclass
class _Chain:
    """A key's versions since its chain started: the value before, then each row."""

    before: bytes | None
    versions: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    last: float = 0.0  # when the newest was recorded (monotonic)
    nbytes: int = 0  # the key, the value before and every version's bytes


class History:
    """One changelog partition's recent versions of each key (see the module doc).

    Written by the materializer's thread, read by queries' threads: a chain is never
    removed before the floor says so, and readers copy what they read."""

    def __init__(self, keep_s: float = KEEP_S, max_versions: int = MAX_VERSIONS) -> None:
        #: one past the newest record a row outside the chains folded, per input
        #: partition; None: not known (no cut can be rebuilt until :meth:`floor_at`)
        self.floor: Cut | None = None
        self.keep_s = keep_s
        self.max_versions = max_versions
        self.chains: dict[bytes, _Chain] = {}
        self.size = 0
        self.nbytes = 0  # the chains' keys and values (without Python's own overhead)
        self._order: deque[tuple[float, bytes]] = deque()  # (recorded at, key), oldest first
        self.active_until = float("-inf")  # a consistent read's partition read: activate

    def activate(self, now: float | None = None) -> None:
        """Record versions for the next ``ACTIVE_S`` (a consistent read came)."""
        now = time.monotonic() if now is None else now
        self.active_until = now + ACTIVE_S

    def active(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) < self.active_until

    def floor_at(self, ends: Cut) -> None:
        """A floor where none is known: the input's end offsets, read after
        :meth:`activate` (every row stored unrecorded folded records before them)."""
        if self.floor is None:
            self.floor = dict(ends)

    def skip(self) -> None:
        """Rows stored without their versions (restoring, or no consistent read lately):
        the floor is no longer known and every chain goes (one would miss a version)."""
        self.floor = None  # first: a read that finds no chain checks the floor after it
        if self.chains:
            self.chains.clear()
            self._order.clear()
            self.size = 0
            self.nbytes = 0

    def starting(self, keys: Iterable[bytes]) -> list[bytes]:
        """Of ``keys``, those without a chain (their values before are needed)."""
        return [k for k in dict.fromkeys(keys) if k not in self.chains]

    def record(self, versions: Iterable[tuple[bytes, bytes, bytes | None]],
               before: Mapping[bytes, bytes | None], now: float | None = None) -> None:
        """Add rows ``(key, positions, value)`` in changelog order; ``before``: the stored
        value of each key :meth:`starting` named. Then drop what is too old."""
        now = time.monotonic() if now is None else now
        for key, pos, value in versions:
            chain = self.chains.get(key)
            if chain is None:
                chain = _Chain(before.get(key))
                chain.nbytes = len(key) + len(chain.before or b"")
                self.nbytes += chain.nbytes
                self.chains[key] = chain
            chain.versions.append((pos, value))
            grown = len(pos) + len(value or b"")
            chain.nbytes += grown
            self.nbytes += grown
            chain.last = now
            self.size += 1
            self._order.append((now, key))
        self.trim(now)

    def trim(self, now: float | None = None) -> None:
        """Drop the chains unchanged for ``keep_s``, and the oldest beyond
        ``max_versions``, raising the floor first."""
        now = time.monotonic() if now is None else now
        while self._order:
            at, key = self._order[0]
            chain = self.chains.get(key)
            if chain is not None and chain.last > at:  # changed since: a newer entry
                self._order.popleft()
                continue
            if at > now - self.keep_s and self.size <= self.max_versions:
                return
            self._order.popleft()
            if chain is None:
                continue
            if self.floor is not None and chain.versions:
                _raise(self.floor, chain.versions[-1][0])
            del self.chains[key]
            self.size -= len(chain.versions)
            self.nbytes -= chain.nbytes

    def check(self, cut: Cut) -> None:
        """``CutMoved`` (take a new cut) unless rows outside the chains are all within
        ``cut``."""
        floor = self.floor
        if floor is None:
            raise CutMoved("this replica kept no versions until now: a newer cut")
        if any(cut.get(tp, -1) < f - 1 for tp, f in list(floor.items())):
            raise CutMoved("the cut is older than the versions kept (keep_s "
                           f"{self.keep_s:g} s): take a newer one")

    def at(self, key: bytes, cut: Cut) -> tuple[bool, bytes | None]:
        """``(True, value)``: ``key`` changed lately and had ``value`` (None: absent) at
        ``cut``; ``(False, None)``: it did not, its stored value is the cut's.
        ``CutMoved`` naming a lower cut if no version holds exactly the cut."""
        chain = self.chains.get(key)
        if chain is None:
            return False, None
        versions = list(chain.versions)
        i, lowered = _pick([_claims(pos) for pos, _ in versions], cut)
        if lowered:
            raise CutMoved(f"a record within the cut was folded after one past it (key "
                           f"{key[:40]!r}): a lower cut", lower=cut_token(lower(cut, lowered)))
        return True, chain.before if i < 0 else versions[i][1]

    def settle(self, cut: Cut, rounds: int = 64) -> Cut:
        """The newest cut at or below ``cut`` at which every key kept here has a version
        holding exactly the cut (lowered until none was folded out of order around it).
        Versions recorded later cannot change it: once a partition reflects a cut, every
        record within it is folded."""
        chains = [[_claims(pos) for pos, _ in c.versions] for c in list(self.chains.values())]
        for _ in range(rounds):
            lowered: Cut = {}
            for claims in chains:
                for tp, o in _pick(claims, cut)[1].items():
                    lowered[tp] = min(o, lowered.get(tp, o))
            if not lowered:
                return cut
            cut = lower(cut, lowered)
        return cut

    def changed(self, start: bytes | None, end: bytes | None) -> list[bytes]:
        """The keys with a chain in ``[start, end)``, sorted."""
        return sorted(k for k in list(self.chains)
                      if (start is None or k >= start) and (end is None or k < end))
