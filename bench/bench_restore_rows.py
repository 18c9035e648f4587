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

Then a restore's whole work per row in process: ``Materializer.apply`` of ``balances``
rows as the pipeline writes them (headers ``streamiq-pos`` and ``streamiq-ts``, 3 typed
columns checked, the key's partition checked) into a RocksDB store, for a partition
restoring, with Kafka's partitioner hash compiled (``murmurhash2``, the product's) and in
Python (``murmur2_py``) side by side. The consumer's fetch is not in it: on a node the
rate is lower by that and by the cores the pipeline and the broker take.

Usage: .venv/bin/python bench/bench_restore_rows.py [--sizes 100000,200000,400000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fakes import Message

from streamiq.kafka import partitioner
from streamiq.serving.changelog.consistency import row_covered
from streamiq.serving.changelog.materializer import MAX_ROW_POSITIONS, Materializer
from streamiq.serving.changelog.partition import PartitionState
from streamiq.state import open_store
from streamiq.views.bank import BALANCES
from streamiq.views.base import POSITION_HEADER, TIME_HEADER

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


def rows(n: int) -> list[Any]:
    """``n`` balances rows of changelog partition 0 of 1, as the pipeline writes them."""
    ts = str(int(time.time() * 1000)).encode()
    out = []
    for i in range(n):
        a = str(100001 + i)
        value = json.dumps({"account": a, "balance": i, "count": 1,
                            "last_update": 1_700_000_000_000}).encode()
        out.append(Message("cl", 0, i, a.encode(), value,
                           [(POSITION_HEADER, f"in:0:{i}".encode()), (TIME_HEADER, ts)]))
    return out


def apply_rate(msgs: list[Any]) -> float:
    """Keys/s of a restore's ``Materializer.apply`` of ``msgs`` into a fresh RocksDB."""
    with tempfile.TemporaryDirectory(prefix="streamiq-bench-restore-") as d:
        store = open_store("rocksdb", Path(d))
        m = Materializer({}, {"balances": BALANCES}, {"balances": store},
                         {"balances": "cl"}, partitions={"balances": 1},
                         input_ends=lambda tps: dict.fromkeys(tps, 1 << 40))
        m.states[("balances", 0)] = PartitionState(restored=False)
        t0 = time.perf_counter()
        for start in range(0, len(msgs), BATCH):
            m.apply(msgs[start:start + BATCH])
        rate = len(msgs) / (time.perf_counter() - t0)
        store.close()
        return rate


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
    print("\na restore's apply in process (RocksDB), keys/s by the partitioner hash")
    print(f"{'keys':>10} {'compiled':>12} {'Python':>12} {'ratio':>8}")
    compiled = partitioner.unsigned
    for n in sizes:
        msgs = rows(n)
        fast = apply_rate(msgs)
        partitioner.unsigned = partitioner.unsigned_py
        try:
            slow = apply_rate(msgs)
        finally:
            partitioner.unsigned = compiled
        print(f"{n:>10,} {fast:>12,.0f} {slow:>12,.0f} {fast / slow:>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
