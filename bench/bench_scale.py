"""State at production size (issue 49): one view of up to 10M keys on two nodes that
each hold all of it, a wiped node restored from the changelog against copied from its
peer, memory, disk, lookups, and the sending peer's p99 while it sends.

Setup: an embedded broker; rows of ``balances`` (about 90 bytes of JSON each) produced
straight to a 3-partition changelog, as ``bench_sizing`` does, in steps up to each of
``--sizes``. Node A and node B (``--standby-replicas 1``: each holds every partition,
active or standby) follow it. At each size, once A has applied every record:

1. changelog: B stopped, its state folder wiped, started with ``--no-peer-copy
   --no-restore-processes``; seconds from its start to ``/health`` 200 (every partition
   restored), less the start of a node of an empty cluster: keys/s of a restore from the
   changelog in the node's own thread; then again with ``--no-peer-copy`` alone: each
   partition replayed by a process of its own (``serving/changelog/replayer.py``);
2. copy: B stopped and wiped again, started as users run it (it copies every partition
   from A, then follows the changelog): the same figure;
3. the sender's lookups: one client asks A for random keys at a steady pace
   (``--probe-rate``) for 5 s before B starts (idle), while B replays the changelog (A
   sends nothing: what B's start and restore cost A on these shared cores), and while B
   replays in processes, and while B copies from A; p99 of each and their ratio to
   idle (target: at most 2x);
4. memory: each node's resident set, and what its store reports
   (``streamiq_store_memory_bytes``, within ``--store-memory-mb``); disk: A's RocksDB
   folder;
5. lookups: wrk, random keys, c=8, ``--seconds``, on A, at the first and last size.

Usage: python bench/bench_scale.py [--sizes 1000000,3000000,10000000] [--seconds 5]
Needs wrk (apt-get install -y wrk). 10M keys take about 2 GB of disk and 15 minutes.
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from _common import NodeProc, bench_broker, free_port, pct, wait_ready
from bench_queries import wrk  # also puts tests/ on sys.path
from bench_sizing import du_mb, rss_mb
from changelog import produce_rows

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES

PARTITIONS = 3
CLUSTER = "scale"


def rows(lo: int, hi: int) -> Iterator[dict[str, Any]]:
    for i in range(lo, hi):
        yield {"account": f"acct-{i:08d}", "balance": (i * 7919) % 100_000,
               "count": 1 + i % 20, "last_update": 1_700_000_000_000 + i}


def metric(port: int, name: str, labels: str = "") -> float:
    """A node's metric summed over its labels (those including ``labels`` only)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
    return sum(float(m.group(2)) for m in
               re.finditer(rf"^{name}({{[^}}]*}})? (\S+)$", text, re.MULTILINE)
               if labels in (m.group(1) or ""))


class Nodes:
    """The bench's node processes: A and B of the cluster, their state folders."""

    def __init__(self, bootstrap: str, root: Path, memory_mb: int) -> None:
        self.bootstrap = bootstrap
        self.root = root
        self.memory_mb = memory_mb
        self.running: list[NodeProc] = []

    def start(self, name: str, port: int, *extra: str, cluster: str = CLUSTER
              ) -> tuple[NodeProc, float]:
        """A node, and the seconds from its start to ready."""
        t0 = time.monotonic()
        node = NodeProc(port, ["--bootstrap-servers", self.bootstrap, "--cluster", cluster,
                               "--topic-prefix", f"{cluster}-", "--app", "bank",
                               "--partitions", str(PARTITIONS),
                               "--state-dir", str(self.root / name),
                               "--standby-replicas", "1", "--cluster-secret", "scale-secret",
                               "--store-memory-mb", str(self.memory_mb),
                               "--log-level", "info", *extra],
                        self.root / f"node-{name}.log")
        self.running.append(node)
        wait_ready(port, 3600)
        return node, time.monotonic() - t0

    def wipe(self, node: NodeProc, name: str) -> None:
        node.stop()
        self.running.remove(node)
        shutil.rmtree(self.root / name, ignore_errors=True)

    def stop(self) -> None:
        for n in self.running:
            n.stop()


class Prober(threading.Thread):
    """Lookups of random keys on one node at a steady pace; their latencies (ms)."""

    def __init__(self, port: int, keys: list[str], rate: float) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/v1/views/balances/keys/"
        self.keys = keys
        self.gap = 1 / rate
        self.lat: list[float] = []
        self.failed = 0
        self.done = threading.Event()

    def run(self) -> None:
        rnd = random.Random(3)
        with httpx.Client(timeout=10) as c:
            nxt = time.perf_counter()
            while not self.done.is_set():
                t = time.perf_counter()
                try:
                    if c.get(self.url + rnd.choice(self.keys)).status_code != 200:
                        self.failed += 1
                except httpx.HTTPError:
                    self.failed += 1
                self.lat.append((time.perf_counter() - t) * 1000)
                nxt += self.gap
                time.sleep(max(0.0, nxt - time.perf_counter()))

    def stop(self) -> list[float]:
        self.done.set()
        self.join()
        return self.lat


def probe(port: int, keys: list[str], rate: float, seconds: float) -> list[float]:
    p = Prober(port, keys, rate)
    p.start()
    time.sleep(seconds)
    return p.stop()


def caught_up(port: int, records: int) -> None:
    """Until the node has applied ``records`` changelog records (every partition)."""
    while metric(port, "streamiq_changelog_offset") < records:
        time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,3000000,10000000",
                    help="keys at each step, comma-separated, increasing")
    ap.add_argument("--seconds", type=float, default=5.0, help="wrk's run at each size")
    ap.add_argument("--probe-rate", type=float, default=200.0,
                    help="lookups a second of the sender's probe")
    ap.add_argument("--store-memory-mb", type=int, default=256)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found (Debian: apt-get install -y wrk)")
    root = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    broker = bench_broker().start()
    bs = broker.bootstrap_servers
    nodes = Nodes(bs, root, a.store_memory_mb)
    out: list[str] = []
    try:
        empty, empty_s = nodes.start("empty", free_port(), cluster="scale0")
        nodes.wipe(empty, "empty")
        topic = f"{CLUSTER}-{BALANCES.changelog_topic}"
        ensure_topics({"bootstrap.servers": bs}, {topic: PARTITIONS})
        pa, pb = free_port(), free_port()
        node_a, _ = nodes.start("a", pa)
        node_b, _ = nodes.start("b", pb)
        produced = 0
        for n in sizes:
            t0 = time.monotonic()
            produce_rows(bs, topic, BALANCES, rows(produced, n))
            produced = n
            caught_up(pa, n)
            caught_up(pb, n)
            print(f"{n:,} keys produced and applied by both nodes in "
                  f"{time.monotonic() - t0:.0f} s", flush=True)
            keys = [f"acct-{i:08d}" for i in random.Random(n).sample(range(n), 20_000)]
            nodes.wipe(node_b, "b")
            idle = probe(pa, keys, a.probe_rate, 5)
            prober = Prober(pa, keys, a.probe_rate)
            prober.start()
            node_b, replay_s = nodes.start("b", pb, "--no-peer-copy", "--no-restore-processes")
            replaying = prober.stop()
            nodes.wipe(node_b, "b")
            prober = Prober(pa, keys, a.probe_rate)
            prober.start()
            node_b, procs_s = nodes.start("b", pb, "--no-peer-copy")
            in_procs = prober.stop()
            replays = metric(pb, "streamiq_partition_replays_total")
            nodes.wipe(node_b, "b")
            prober = Prober(pa, keys, a.probe_rate)
            prober.start()
            node_b, copy_s = nodes.start("b", pb)
            sending = prober.stop()
            copies = metric(pb, "streamiq_partition_copies_total", 'outcome="copied"')
            failed = metric(pb, "streamiq_partition_copies_total", 'outcome="failed"')
            # less the empty cluster's start, at least 0.1 s: a start varies by tenths
            replay, procs, copy = (max(t - empty_s, 0.1) for t in (replay_s, procs_s, copy_s))
            line = (f"{n:>10,} keys: from the changelog in the node's thread {replay:6.1f} s "
                    f"({n / replay / 1e3:5.0f}k keys/s), in processes ({replays:.0f} "
                    f"partitions) {procs:6.1f} s ({n / procs / 1e3:5.0f}k keys/s, "
                    f"{replay / procs:.2f}x); copied from the peer "
                    f"({copies:.0f} partitions, {failed:.0f} failed) {copy:5.1f} s "
                    f"({n / copy / 1e3:5.0f}k keys/s, "
                    f"{replay / copy:.1f}x); start to ready {replay_s:.1f} and "
                    f"{copy_s:.1f} s")
            print(line, flush=True)
            out.append(line)
            p99 = {k: pct(v, 99) for k, v in (("idle", idle), ("replay", replaying),
                                             ("procs", in_procs), ("send", sending))}
            line = (f"{'':>10}  A's lookups p99 ({a.probe_rate:.0f}/s): idle "
                    f"{p99['idle']:.2f} ms; while B replays the changelog (A sends nothing) "
                    f"{p99['replay']:.2f} ms ({p99['replay'] / p99['idle']:.1f}x), in "
                    f"processes {p99['procs']:.2f} ms ({p99['procs'] / p99['idle']:.1f}x); "
                    "while A "
                    f"sends B its copy {p99['send']:.2f} ms ({p99['send'] / p99['idle']:.1f}x)"
                    f"; {prober.failed} failed")
            print(line, flush=True)
            out.append(line)
            mem = {name: (rss_mb(nd.proc.pid), metric(nd.port, "streamiq_store_memory_bytes")
                          / 2**20) for name, nd in (("A", node_a), ("B", node_b))}
            line = (f"{'':>10}  memory (resident, store): " + ", ".join(
                f"{k} {r:.0f} MB, {s:.0f} MB" for k, (r, s) in mem.items())
                + f"; disk (A's RocksDB) {du_mb(root / 'a'):.0f} MB "
                f"({du_mb(root / 'a') / (n / 1e6):.0f} MB per million keys)")
            print(line, flush=True)
            out.append(line)
            if n in (sizes[0], sizes[-1]):
                paths = [f"/v1/views/balances/keys/{k}" for k in keys]
                got = wrk(f"http://127.0.0.1:{pa}", paths, root, 8, a.seconds,
                          pids=[node_a.proc.pid])
                line = (f"{'':>10}  lookups on A (wrk c=8): {got['rps']:,.0f}/s, p50 "
                        f"{got['p50']:.2f} ms, p99 {got['p99']:.2f} ms, "
                        f"{got['cpu_us']:.0f} us of CPU each")
                print(line, flush=True)
                out.append(line)
        print(f"\nstart of a node of an empty cluster: {empty_s:.1f} s (taken off each "
              f"figure); --store-memory-mb {a.store_memory_mb}; {PARTITIONS} partitions")
        print("\n".join(out))
    finally:
        nodes.stop()
        broker.stop()
        subprocess.run(["rm", "-rf", str(root)], check=False)


if __name__ == "__main__":
    main()
