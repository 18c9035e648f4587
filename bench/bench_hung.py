"""What a hung or slow node costs the queries through the others, one run, side by side:

1. three nodes (one standby each) under lookups and 5-key multi-gets through nodes 1
   and 2 (``tests/hungload.py``, each answer checked): healthy, then with node 3
   stopped (SIGSTOP); the slowest answer and the p99 of each, and their ratio. Target:
   the slowest while stopped under 1 s (a hop's timeout is 10 s; unhedged, a lookup
   forwarded to the stopped node waited for it and failed);
2. node 3 behind a link delaying every byte 300 ms each way (``tests/delayproxy.py``):
   the p99 against that link's round trip (600 ms, what an unhedged forward costs).
   Target: under it.

The integration tests (``tests/integration/test_hung_node.py``) assert no answer fails
or is wrong and the hedges are sent; the times are measured here.

Usage: .venv/bin/python bench/bench_hung.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import NodeProc, bench_broker, free_port, pct, wait_ready
from changelog import produce_rows
from hungload import hedges_sent, rows, run

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES

TESTS = Path(__file__).resolve().parents[1] / "tests"
DELAY_S = 0.3


def _args(bootstrap: str, cluster: str, state: Path) -> list[str]:
    return ["--bootstrap-servers", bootstrap, "--cluster", cluster, "--topic-prefix",
            f"{cluster}-", "--app", "bank", "--state-dir", str(state), "--log-level", "warning",
            "--standby-replicas", "1"]


def _measure(ports: list[int], seconds: float) -> dict[str, Any]:
    stats: dict[str, Any] = {"ok": 0, "wrong": [], "failed": [], "slowest": 0.0,
                             "latencies": []}
    asyncio.run(run(ports, seconds, stats))
    return stats


def _line(name: str, s: dict[str, Any]) -> str:
    lat = s["latencies"]
    return (f"  {name:<22} {s['ok']:6d} ok {len(s['wrong'])} wrong {len(s['failed'])} failed"
            f"  p50 {pct(lat, 50) * 1000:7.1f} ms  p99 {pct(lat, 99) * 1000:7.1f} ms  "
            f"slowest {s['slowest'] * 1000:7.1f} ms")


def _cluster(bootstrap: str, root: Path, name: str, slow: tuple[int, int] | None = None
             ) -> tuple[list[NodeProc], list[int]]:
    """Three nodes of cluster ``name`` over 300 accounts' rows; ``slow``: node 3's port
    and the proxy's it advertises."""
    topic = f"{name}-{BALANCES.changelog_topic}"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    produce_rows(bootstrap, topic, BALANCES, rows())
    args = _args(bootstrap, name, root / name)
    ports = [free_port(), free_port(), free_port() if slow is None else slow[0]]
    nodes = [NodeProc(p, args, root / f"logs/{name}-{p}.log") for p in ports[:2]]
    nodes.append(NodeProc(ports[2], [*args, *([] if slow is None else [
        "--advertised", f"127.0.0.1:{slow[1]}"])], root / f"logs/{name}-{ports[2]}.log"))
    for p in ports:
        wait_ready(p)
    time.sleep(3)  # membership settles: every partition on two replicas
    _measure(ports[:2], 3)  # warm: every node asked, the hedge delays measured
    return nodes, ports


def _stop(nodes: list[NodeProc]) -> None:
    for n in nodes:
        n.stop()


def stopped(bootstrap: str, root: Path, seconds: float) -> None:
    nodes, ports = _cluster(bootstrap, root, "hung")
    try:
        healthy = _measure(ports[:2], seconds)
        os.kill(nodes[2].proc.pid, signal.SIGSTOP)
        try:
            hung = _measure(ports[:2], seconds)
        finally:
            os.kill(nodes[2].proc.pid, signal.SIGCONT)
        hedges = hedges_sent(ports[0]) + hedges_sent(ports[1])
    finally:
        _stop(nodes)
    print(f"1. one node of three stopped (SIGSTOP), {seconds:g} s of load each, "
          f"through the other two:")
    print(_line("healthy", healthy))
    print(_line("node 3 stopped", hung))
    print(f"  slowest stopped/healthy {hung['slowest'] / healthy['slowest']:.2f}x, "
          f"p99 {pct(hung['latencies'], 99) / pct(healthy['latencies'], 99):.2f}x; "
          f"{hedges} hedges sent; target: slowest < 1000 ms "
          f"({'met' if hung['slowest'] < 1.0 else 'NOT met'})")


def slow_link(bootstrap: str, root: Path, seconds: float) -> None:
    node3, link = free_port(), free_port()
    proxy = subprocess.Popen([sys.executable, str(TESTS / "delayproxy.py"), str(link),
                              str(node3), str(DELAY_S)], stdout=subprocess.PIPE, text=True)
    try:
        assert proxy.stdout is not None and proxy.stdout.readline().strip() == "ready"
        nodes, ports = _cluster(bootstrap, root, "slow", (node3, link))
        try:
            slow = _measure(ports[:2], seconds)
            hedges = hedges_sent(ports[0]) + hedges_sent(ports[1])
        finally:
            _stop(nodes)
    finally:
        proxy.terminate()
        proxy.wait(20)
    p99 = pct(slow["latencies"], 99)
    print(f"2. node 3 behind a link of {DELAY_S * 1000:.0f} ms each way, {seconds:g} s of "
          f"load through the other two:")
    print(_line("slow link", slow))
    print(f"  p99 / the link's round trip {p99 / (2 * DELAY_S):.2f}x; {hedges} hedges sent; "
          f"target < 1 ({'met' if p99 < 2 * DELAY_S else 'NOT met'})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seconds", type=float, default=20.0, help="load per phase (s)")
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="streamiq-bench-hung-"))
    with bench_broker() as broker:
        stopped(broker.bootstrap_servers, root, a.seconds)
        slow_link(broker.bootstrap_servers, root, a.seconds)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
