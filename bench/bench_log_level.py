"""Lookups/s at the default log level (info) vs ``--log-level warning``, same run.

Two identical 2-node clusters on one broker and one changelog (100k accounts by
default), one started at the default log level and one at ``warning``. wrk sends the
same key lookups (local and forwarded, as a load balancer spreads them) to the first
node of each, in back-to-back pairs whose order alternates; the median of the per-pair
throughput ratios is checked against the target: the default level costs at most 10%
(info/warning >= 0.9x, issue 13). Needs wrk (Debian: ``apt-get install -y wrk``).

    python bench/bench_log_level.py [--keys 100000] [--pairs 8] [--seconds 2]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from _common import NodeProc, free_port, wait_ready
from bench_queries import rows, wrk  # also puts tests/ on sys.path
from changelog import produce_rows

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.broker import EmbeddedBroker
from streamiq.views.bank import BALANCES

TARGET = 0.9


def start_cluster(bootstrap: str, root: Path, name: str, level: str) -> list[NodeProc]:
    args = ["--bootstrap-servers", bootstrap, "--cluster", name, "--topic-prefix", "bl-",
            "--app", "bank", "--state-dir", str(root / name), "--standby-replicas", "0",
            *(["--log-level", level] if level != "default" else [])]
    return [NodeProc(free_port(), args, root / f"{name}-{i}.log") for i in range(2)]


def mixed_paths(port: int, keys: list[str], n: int = 10_000) -> list[str]:
    """Half keys the entry node owns (answered locally), half its peer owns (forwarded):
    the two clusters hash partitions to nodes differently, so the same keys would give
    them different mixes."""
    from streamiq.views.bank import BALANCES

    meta = httpx.get(f"http://127.0.0.1:{port}/v1/cluster").json()
    me = meta["self"]
    mine = {int(p) for p, pv in meta["views"]["balances"].items() if pv["assigned"][0] == me}
    local = [k for k in keys if BALANCES.partition_of(k, 3) in mine][:n // 2]
    other = [k for k in keys if BALANCES.partition_of(k, 3) not in mine][:n // 2]
    assert local and other, meta
    mix = [k for pair in zip(local, other, strict=False) for k in pair]
    return [f"/v1/views/balances/keys/{k}" for k in mix]


def wait_loaded(port: int, n: int) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        d = httpx.get(f"http://127.0.0.1:{port}/v1/views/balances/aggregate", timeout=30).json()
        nodes = httpx.get(f"http://127.0.0.1:{port}/v1/cluster").json()["nodes"]
        if d["status"] == "OK" and d["groups"] and d["groups"][0]["count(*)"] == n \
                and len(nodes) == 2:
            return
        time.sleep(0.5)
    raise TimeoutError(f"node {port} did not load {n} rows")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--conns", type=int, default=8)
    a = ap.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found (Debian: apt-get install -y wrk)")
    root = Path(tempfile.mkdtemp(prefix="bench-log-level-"))
    broker = EmbeddedBroker("127.0.0.1", free_port()).start()
    clusters: dict[str, list[NodeProc]] = {}
    try:
        ensure_topics({"bootstrap.servers": broker.bootstrap_servers},
                      {"bl-balances-changelog": 3})
        data = rows(a.keys)
        produce_rows(broker.bootstrap_servers, "bl-balances-changelog", BALANCES, data)
        clusters = {level: start_cluster(broker.bootstrap_servers, root, f"l{level[0]}", level)
                    for level in ("default", "warning")}
        for nodes in clusters.values():
            for n in nodes:
                wait_ready(n.port, 180)
            wait_loaded(nodes[0].port, a.keys)
        keys = [r["account"] for r in data]
        paths = {level: mixed_paths(nodes[0].port, keys) for level, nodes in clusters.items()}
        ratios, got = [], {"default": [], "warning": []}
        for i in range(a.pairs):
            order = ["default", "warning"] if i % 2 == 0 else ["warning", "default"]
            pair = {}
            for level in order:
                nodes = clusters[level]
                pair[level] = wrk(f"http://127.0.0.1:{nodes[0].port}", paths[level], root,
                                  a.conns,
                                  a.seconds, pids=[n.proc.pid for n in nodes])
                got[level].append(pair[level]["rps"])
            ratios.append(pair["default"]["rps"] / pair["warning"]["rps"])
            print(f"pair {i + 1}: default {pair['default']['rps']:.0f} req/s, warning "
                  f"{pair['warning']['rps']:.0f} req/s, ratio {ratios[-1]:.2f}", flush=True)
        med = statistics.median(ratios)
        print(f"lookups/s (local + forwarded, c={a.conns}): default log level "
              f"{statistics.median(got['default']):.0f}, --log-level warning "
              f"{statistics.median(got['warning']):.0f}; median of {a.pairs} paired ratios "
              f"{med:.2f}x (target >= {TARGET}x: {'met' if med >= TARGET else 'NOT met'})")
    finally:
        for nodes in clusters.values():
            for n in nodes:
                n.stop()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
