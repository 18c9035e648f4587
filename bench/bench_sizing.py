"""Sizing figures for one serving node: memory, disk, restore time, lookups per core.

Setup: an embedded broker on a free port; ``--keys`` rows of ``balances`` (about 100
bytes of JSON each) produced straight to a 3-partition changelog. One node
(``--standby-replicas 0``: it holds every partition) is started on it:

1. restore from an empty store: seconds from the process start to ``/health`` 200,
   and the same less the start of a node of an empty cluster (Python, imports,
   joining): the part that grows with the keys, the one to extrapolate from;
2. memory: resident set of that node, minus that of a node of an empty cluster
   started the same way (the baseline: Python, the libraries); not a per-key figure
   (RocksDB's write buffers fill during the restore): compare several ``--keys``;
3. disk: the node's RocksDB directory, after a restart (memtables flushed);
4. restart from its checkpoint: seconds to ready again;
5. lookups: wrk, random keys, c=8, ``--seconds``; lookups/s and server CPU per
   lookup, hence lookups/s per fully used core.

Each figure is printed raw and per million keys. Usage:
    python bench/bench_sizing.py [--keys 1000000] [--seconds 5]
Needs wrk (apt-get install -y wrk).
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx
from _common import NodeProc, bench_broker, free_port, wait_ready
from bench_queries import rows, wrk  # also puts tests/ on sys.path
from changelog import produce_rows

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def du_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def start(bootstrap: str, cluster: str, state: Path, log: Path,
          port: int | None = None) -> tuple[NodeProc, float]:
    """A node (its state lives under its endpoint: the same port finds it again)."""
    port = port or free_port()
    t0 = time.monotonic()
    node = NodeProc(port, ["--bootstrap-servers", bootstrap, "--cluster", cluster,
                           "--topic-prefix", f"{cluster}-", "--app", "bank",
                           "--state-dir", str(state), "--standby-replicas", "0",
                           "--log-level", "warning"], log)
    wait_ready(port, 1800)
    return node, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=5.0)
    a = ap.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found (Debian: apt-get install -y wrk)")
    root = Path(tempfile.mkdtemp(prefix="bench-sizing-"))
    broker = bench_broker().start()
    nodes: list[NodeProc] = []
    try:
        bs = broker.bootstrap_servers
        empty, empty_s = start(bs, "sz0", root / "empty", root / "node-empty.log")
        nodes.append(empty)
        time.sleep(3)
        base = rss_mb(empty.proc.pid)
        empty.stop()
        topic = f"sz-{BALANCES.changelog_topic}"
        ensure_topics({"bootstrap.servers": bs}, {topic: 3})
        data = rows(a.keys)
        produce_rows(bs, topic, BALANCES, data)
        node, restore_s = start(bs, "sz", root / "state", root / "node-1.log")
        nodes.append(node)
        time.sleep(3)
        rss = rss_mb(node.proc.pid) - base
        node.stop()
        disk = du_mb(root / "state")
        node, restart_s = start(bs, "sz", root / "state", root / "node-2.log", node.port)
        nodes.append(node)
        keys = [r["account"] for r in random.Random(1).sample(data, min(20_000, a.keys))]
        paths = [f"/v1/views/balances/keys/{k}" for k in keys]
        httpx.get(f"http://127.0.0.1:{node.port}{paths[0]}", timeout=10).raise_for_status()
        got = wrk(f"http://127.0.0.1:{node.port}", paths, root, 8, a.seconds,
                  pids=[node.proc.pid])
        per_core = 1e6 / got["cpu_us"]
        m = a.keys / 1e6
        print(f"{a.keys:,} keys on one node (3 partitions, ~100-byte rows):")
        print(f"  restore from an empty store: {restore_s:.1f} s; less an empty node's "
              f"start ({empty_s:.1f} s): {restore_s - empty_s:.1f} s "
              f"({(restore_s - empty_s) / m:.1f} s per million keys)")
        print(f"  restart from its checkpoint: {restart_s:.1f} s")
        print(f"  memory over an empty node ({base:.0f} MB): +{rss:.0f} MB (not per key: "
              "RocksDB's write buffers fill, then grow slowly)")
        print(f"  disk (RocksDB): {disk:.0f} MB ({disk / m:.0f} MB per million keys)")
        print(f"  lookups (c=8, local): {got['rps']:,.0f}/s, p50 {got['p50']:.2f} ms, "
              f"{got['cpu_us']:.0f} us of server CPU each: {per_core:,.0f} lookups/s per "
              "core")
    finally:
        for n in nodes:
            n.stop()
        broker.stop()
        subprocess.run(["rm", "-rf", str(root)], check=False)


if __name__ == "__main__":
    main()
