"""A partition taken in from a snapshot against restored from its changelog: one run.

For each size, a RocksDB store holds that many ``balances`` rows (about 100 bytes of JSON
each) in partition 1 of 3. Printed side by side: ``Store.export`` of the partition to a
file (keys/s, MB: its database's files, tarred), ``Store.ingest`` of it into another
store (keys/s: the checks, unpacking and opening it; every row counted after, untimed),
export and ingest together, and a restore of the same rows through
``Materializer.apply`` as a node replays its changelog (keys/s, the changelog's fetch
not in it; ``bench_restore_rows.py``), and the ratio. Issue 49's target for a bootstrap
from a peer: at least 1M keys/s, 10M keys in 10 s; the copy between nodes over the peer
protocol is ``bench_scale.py``'s.

Usage: .venv/bin/python bench/bench_snapshots.py [--sizes 1000000,3000000] [--restore-max N]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_restore_rows import apply_rate, rows

from streamiq.state import Checkpoint, open_store

BATCH = 20_000


def fill(path: Path, n: int) -> None:
    """A RocksDB store with ``n`` balances rows in partition 1 (and a few in 0 and 2)."""
    store = open_store("rocksdb", path)
    for p in (0, 2):
        store.apply(p, [(b"x%d" % i, b"{}") for i in range(100)], Checkpoint(offset=100))
    for start in range(0, n, BATCH):
        puts = [(str(100_001 + i).encode(), json.dumps(
            {"account": str(100_001 + i), "balance": i, "count": 1,
             "last_update": 1_700_000_000_000}).encode())
            for i in range(start, min(n, start + BATCH))]
        store.apply(1, puts, Checkpoint(offset=start + len(puts),
                                        position={"in": {1: start + len(puts)}}))
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1000000,3000000", help="rows, comma-separated")
    ap.add_argument("--restore-max", type=int, default=1_000_000,
                    help="restore through Materializer.apply at most this many rows (its "
                         "rate is flat with size: bench_restore_rows.py) [default 1M]")
    args = ap.parse_args()
    print(f"{'keys':>10} {'export k/s':>11} {'MB':>6} {'ingest k/s':>11} "
          f"{'both k/s':>10} {'replay k/s':>11} {'both/replay':>12}")
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="streamiq-bench-snap-") as d:
            root = Path(d)
            fill(root / "a", n)
            a, b = open_store("rocksdb", root / "a"), open_store("rocksdb", root / "b")
            t0 = time.perf_counter()
            snap = a.export(1, root / "p1.snap")
            t1 = time.perf_counter()
            assert snap is not None  # its rows: RocksDB's estimate
            b.ingest(snap)
            t2 = time.perf_counter()
            assert b.checkpoint(1) == a.checkpoint(1)
            assert sum(1 for _ in b.scan(1)) == n, "rows lost in the copy"  # not timed
            a.close()
            b.close()
        replay = apply_rate(rows(min(n, args.restore_max)))
        both = n / (t2 - t0)
        print(f"{n:>10,} {n / (t1 - t0):>11,.0f} {snap.size / 1e6:>6.1f} "
              f"{n / (t2 - t1):>11,.0f} {both:>10,.0f} {replay:>11,.0f} "
              f"{both / replay:>11.1f}x", flush=True)


if __name__ == "__main__":
    main()
