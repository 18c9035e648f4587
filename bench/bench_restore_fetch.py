"""A restore from the changelog through a real consumer, in process: keys/s and what
the thread waits, with the product's consumer settings against librdkafka's default
``fetch.queue.backoff.ms`` (1 s), side by side in one run (issue 49).

Setup: an embedded broker; ``--keys`` rows of ``balances`` produced straight to a
3-partition changelog. Each round restores every partition into a fresh RocksDB store
with ``Materializer`` as a node runs it (its own thread and consumer), from ``want`` to
every partition restored; the variants alternate. Printed per round: keys/s (wall), the
process's CPU per key, and the polls that came back empty (each waited up to 50 ms).

Where the rest of a node's restore goes (the broker's and other nodes' share of the two
cores, the node's start) is ``bench_scale.py``'s.

Usage: python bench/bench_restore_fetch.py [--keys 300000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import bench_broker

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from changelog import produce_rows

from streamiq.kafka.admin import ensure_topics
from streamiq.serving.changelog import materializer as mz
from streamiq.state import open_store
from streamiq.views.bank import BALANCES

TOPIC, PARTITIONS = "bench-restore-fetch", 3
VARIANTS = {"librdkafka's 1 s backoff": {"fetch.queue.backoff.ms": 1000},
            "the product's": {}}


def restore(bootstrap: str, extra: dict[str, Any], keys: int) -> tuple[float, float, int]:
    """One restore of every partition: keys/s, CPU us per key, empty polls."""
    empty = 0

    def count(msgs: list[Any]) -> None:
        nonlocal empty
        empty += not msgs

    mz.before_apply = count
    with tempfile.TemporaryDirectory(prefix="streamiq-bench-restore-") as d:
        store = open_store("rocksdb", Path(d))
        m = mz.Materializer({"bootstrap.servers": bootstrap, **extra}, {"balances": BALANCES},
                            {"balances": store}, {"balances": TOPIC},
                            partitions={"balances": PARTITIONS})
        t0, c0 = time.monotonic(), time.process_time()
        m.want({("balances", p) for p in range(PARTITIONS)})
        m.start()
        while not (len(m.states) == PARTITIONS
                   and all(s.restored for s in m.states.values())):
            time.sleep(0.005)
        wall, cpu = time.monotonic() - t0, time.process_time() - c0
        m.stop()
        store.close()
    mz.before_apply = None
    return keys / wall, cpu / keys * 1e6, empty


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    broker = bench_broker()
    broker.start()
    try:
        boot = broker.bootstrap_servers
        ensure_topics({"bootstrap.servers": boot}, {TOPIC: PARTITIONS})
        produce_rows(boot, TOPIC, BALANCES, ({"account": str(100_000 + i), "balance": i,
                                              "count": 1, "last_update": 0}
                                             for i in range(args.keys)))
        rates: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for r in range(args.rounds):
            for name, extra in VARIANTS.items():
                rate, cpu_us, empty = restore(boot, extra, args.keys)
                rates[name].append(rate)
                print(f"round {r + 1}: {name:>25}: {rate:>9,.0f} keys/s, "
                      f"{cpu_us:.2f} us of CPU a key, {empty} empty polls", flush=True)
        old, new = (statistics.median(v) for v in rates.values())
        print(f"\n{args.keys:,} keys, medians: {old:,.0f} -> {new:,.0f} keys/s "
              f"({new / old:.2f}x)")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
