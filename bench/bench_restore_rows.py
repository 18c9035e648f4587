"""A restore's bookkeeping of rows' input positions, before and after issue 49's fix: one run.

While a replica restores a partition from its changelog, every row it applies carries
the input positions it reflects (``streamiq-pos``), and the materializer remembers them
per key (``Materializer._remember``, at most ``MAX_ROW_POSITIONS``) until a marker
covers them. Before the fix that memory was a plain dict whose oldest key was deleted
with ``del rows[next(iter(rows))]``: a dict keeps a hole where a key was deleted, and
every later ``next(iter())`` scans past all the holes at its front, so once the cap was
reached each row cost time proportional to the rows already restored, and a restore
slowed with size (py-spy on the demo: 47% of the node's time in ``_remember``). Now an
``OrderedDict`` whose ``popitem(last=False)`` is O(1).

For each size, the same rows (in poll batches of 500, no marker: a restore of rows that
no marker yet covers, the worst case) go through the old code (a copy, below) and the
new, side by side; printed: keys/s of each and the ratio. The new must stay flat with
size; the old falls once past the cap.

Usage: .venv/bin/python bench/bench_restore_rows.py [--sizes 100000,200000,400000]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from streamiq.serving.changelog.consistency import row_covered
from streamiq.serving.changelog.materializer import MAX_ROW_POSITIONS, Materializer
from streamiq.serving.changelog.partition import PartitionState

BATCH = 500
POS = b'{"bank-transactions":{"0":1}}'


def old_remember(st: Any, rows: dict[bytes, bytes], marked: bool) -> None:
    """``Materializer._remember`` before the fix (7223ee5 and earlier), verbatim."""
    if rows:
        for key in rows:
            st.rows.pop(key, None)
        st.rows.update(rows)
    if marked and st.rows:
        st.rows = {k: v for k, v in st.rows.items() if not row_covered(v, st.position)}
    while len(st.rows) > MAX_ROW_POSITIONS:
        del st.rows[next(iter(st.rows))]


def run(remember: Callable[[Any, dict[bytes, bytes], bool], None], st: Any,
        n: int) -> float:
    """Keys/s of ``remember`` over ``n`` distinct keys in poll batches."""
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        remember(st, {b"k%09d" % i: POS for i in range(start, min(n, start + BATCH))},
                 False)
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100000,200000,400000",
                    help="keys restored per run, comma-separated")
    sizes = [int(s) for s in ap.parse_args().sizes.split(",")]
    print(f"rows' positions kept at most: {MAX_ROW_POSITIONS:,}; poll batches of {BATCH}")
    print(f"{'keys':>10} {'old keys/s':>12} {'new keys/s':>12} {'new/old':>8}")
    for n in sizes:
        old_st = PartitionState()
        old_st.rows = {}  # type: ignore[assignment]  # the old plain dict
        old = run(old_remember, old_st, n)
        new = run(Materializer._remember, PartitionState(), n)
        print(f"{n:>10,} {old:>12,.0f} {new:>12,.0f} {new / old:>7.1f}x", flush=True)


if __name__ == "__main__":
    main()
