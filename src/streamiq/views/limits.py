"""Bounds on input values: one definition for ingest (a 400) and the pipeline (a dead letter).

A record the pipeline cannot aggregate must never reach the aggregation: Spark runs
with ANSI arithmetic, so one ``amount`` near 2**63 makes ``sum`` raise an overflow, the
query fails, and on restart it replays the same micro-batch and fails again (a permanent
outage from one record). So each view declares the range of its numeric inputs
(``View.checks`` entries made here) and the validation layer
(``streamiq.pipeline.deadletter``) sends a record outside it to the dead-letter topic
with a reason naming the field. Ingest answers 400 for the same values, from the same
constants, before anything is produced.

The bounds, and why:

* ``|amount| <= MAX_AMOUNT = 10**12`` (orders: ``0 <= amount``). It is the bound ingest
  has always applied, so no write that was accepted before is refused now. It is far
  below 2**53, so every in-range integer amount is exact as a double (orders' ``amount``
  and ``revenue`` are doubles) and in a JavaScript client. A single amount can no
  longer overflow anything; a *sum* of many still could in BIGINT (9.2 million records
  of 10**12 on one account, minutes of traffic), so the bank sums amounts as
  ``DECIMAL(38,0)`` (``views/bank.py``): overflowing that takes 10**26 maximal records on
  one key, which cannot happen. Orders' revenue is a double: finite inputs of at most
  10**12 reach its range (1.8e308) only after ~10**296 records, so it never becomes
  infinite either.
* ``MIN_TS_MS <= ts <= MAX_TS_MS``: epoch milliseconds from 1970-01-01 to
  9999-12-31T23:59:59.999Z, the range of Spark's own TIMESTAMP type. Orders turn ``ts``
  into an event time (``timestamp_millis``, microseconds in a long): a ``ts`` near
  2**63 overflows there; anything in this range does not, nor do the 1-minute window
  bounds computed from it. Ingest stamps ``ts`` itself, so only records produced
  directly to the topic can be out of range.
* Non-finite doubles (``NaN``, ``Infinity``; ``1e309`` parses as Infinity) are refused
  for *every* floating-point field of every view, not declared per view: one such
  value turns every sum over its key into NaN/Infinity for good, which no JSON answer
  can carry. The validation layer does that from the view's schema.

Range checks are plain comparisons (``BETWEEN``), never ``abs(x)``: under ANSI,
``abs(-2**63)`` itself overflows, and a check that raises would crash the batch it is
meant to protect.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AMOUNT", "EVENT_TS", "MAX_AMOUNT", "MAX_TS_MS", "MIN_TS_MS", "ORDER_AMOUNT", "Bound",
]

MAX_AMOUNT = 10**12
MIN_TS_MS = 0
MAX_TS_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, Spark's largest timestamp


@dataclass(frozen=True)
class Bound:
    """An inclusive numeric range ``[lo, hi]`` for an input field."""

    lo: int
    hi: int

    def check(self, field: str) -> tuple[str, str]:
        """A ``View.checks`` entry: the Spark SQL condition and the reason naming ``field``."""
        return (f"`{field}` BETWEEN {self.lo} AND {self.hi}",
                f"{field} out of range [{self.lo}, {self.hi}]")

    def contains(self, value: int | float) -> bool:
        """The same test in Python (``NaN`` is outside, as in Spark's comparison)."""
        return self.lo <= value <= self.hi


AMOUNT = Bound(-MAX_AMOUNT, MAX_AMOUNT)  # a bank transaction: negative is a debit
ORDER_AMOUNT = Bound(0, MAX_AMOUNT)  # an order's amount
EVENT_TS = Bound(MIN_TS_MS, MAX_TS_MS)  # an event time in epoch milliseconds
