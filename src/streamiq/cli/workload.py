"""What ``streamiq load`` writes and how fast: deterministic writes, a pacer, totals.

The writes of a seed are always the same sequence (``random.Random(seed)``), so a run
can be repeated and its expected view contents computed; :class:`Totals` adds up what
was acknowledged, per key, in the view's own columns (``balances``: ``count`` and
``balance``; ``order_counts``: ``count`` and ``revenue``).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SCENARIOS", "Pacer", "Totals", "Write", "bank_writes", "order_writes"]

FIRST_ACCOUNT = 100001
ORDER_TYPES = ("GENERAL", "RESTAURANT")


@dataclass(frozen=True)
class Write:
    """One POST to the ingest service and what it adds to its view key."""

    path: str
    params: dict[str, Any] | None
    body: dict[str, Any] | None
    key: str
    amount: float


def bank_writes(seed: int, keys: int) -> Iterator[Write]:
    """Transactions on accounts 100001.. (``keys`` of them), amounts -20..100."""
    rnd = random.Random(seed)
    while True:
        account = str(FIRST_ACCOUNT + rnd.randrange(keys))
        amount = rnd.randint(-20, 100)
        yield Write(f"/account/{account}", {"amount": amount}, None, account, amount)


def order_writes(seed: int, keys: int) -> Iterator[Write]:
    """Orders at store-1.. (``keys`` stores), either type, amounts 1.00..100.00."""
    rnd = random.Random(seed)
    i = 0
    while True:
        i += 1
        store = f"store-{rnd.randrange(keys) + 1}"
        typ = rnd.choice(ORDER_TYPES)
        amount = round(rnd.uniform(1, 100), 2)
        body = {"order_id": f"load-{seed}-{i}", "store": store, "type": typ, "amount": amount}
        yield Write("/orders", None, body, f"{store}|{typ}", amount)


#: scenario -> (writes, the ingest topic it needs, the view it feeds, its sum column)
SCENARIOS: dict[str, tuple[Callable[[int, int], Iterator[Write]], str, str, str]] = {
    "bank": (bank_writes, "bank-transactions", "balances", "balance"),
    "orders": (order_writes, "orders", "order_counts", "revenue"),
}


@dataclass
class Pacer:
    """Paced sleeps: write ``i`` is due ``i / rate`` seconds after the start.

    A run that falls behind catches up by at most one second of writes (a token bucket
    holding ``rate`` tokens), never by a burst of everything it missed. ``rate`` 0 means
    as fast as the ingest answers.
    """

    rate: float
    clock: Callable[[], float] = time.monotonic
    _next: float | None = None

    def wait(self) -> float:
        """Seconds to sleep before the next write (taking its slot)."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        if self._next is None or self._next < now - 1.0:
            self._next = now
        delay = max(0.0, self._next - now)
        self._next += 1.0 / self.rate
        return delay


@dataclass
class Totals:
    """Acknowledged writes per key, failures, and the positions they reached."""

    sum_column: str
    sent: int = 0
    failed: int = 0
    first_error: str | None = None
    last_position: str | None = None
    keys: dict[str, dict[str, float]] = field(default_factory=dict)
    _ends: dict[tuple[str, int], int] = field(default_factory=dict)

    def ok(self, write: Write, answer: dict[str, Any]) -> None:
        self.sent += 1
        row = self.keys.setdefault(write.key, {"count": 0, self.sum_column: 0})
        row["count"] += 1
        row[self.sum_column] = round(row[self.sum_column] + write.amount, 2)
        self.last_position = answer.get("position")
        tp = (str(answer.get("topic")), int(answer.get("partition", 0)))
        self._ends[tp] = max(self._ends.get(tp, -1), int(answer.get("offset", -1)))

    def fail(self, error: str) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = error

    @property
    def position(self) -> str | None:
        """One token covering every acknowledged write (each partition's last offset):
        ``query --position`` with it waits until all of them are reflected."""
        if not self._ends:
            return None
        return ",".join(f"{t}:{p}:{o}" for (t, p), o in sorted(self._ends.items()))
