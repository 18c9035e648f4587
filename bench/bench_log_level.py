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
from _common import NodeProc, bench_broker, free_port, stop_all, wait_ready
from bench_queries import rows, wrk  # also puts tests/ on sys.path
from changelog import produce_rows

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES

TARGET = 0.9


def start_cluster(bootstrap: str, root: Path, name: str, extra: list[str]) -> list[NodeProc]:
    args = ["--bootstrap-servers", bootstrap, "--cluster", name, "--topic-prefix", "bl-",
            "--app", "bank", "--state-dir", str(root / name), "--standby-replicas", "0", *extra]
    return [NodeProc(free_port(), args, root / f"{name}-{i}.log") for i in range(2)]


def mixed_paths(port: int, keys: list[str], n: int = 10_000,
                headers: dict[str, str] | None = None) -> list[str]:
    """Half keys the entry node owns (answered locally), half its peer owns (forwarded):
    the two clusters hash partitions to nodes differently, so the same keys would give
    them different mixes."""
    from streamiq.views.bank import BALANCES

    meta = httpx.get(f"http://127.0.0.1:{port}/v1/cluster", headers=headers).json()
    me = meta["self"]
    mine = {int(p) for p, pv in meta["views"]["balances"].items() if pv["assigned"][0] == me}
    local = [k for k in keys if BALANCES.partition_of(k, 3) in mine][:n // 2]
    other = [k for k in keys if BALANCES.partition_of(k, 3) not in mine][:n // 2]
    assert local and other, meta
    mix = [k for pair in zip(local, other, strict=False) for k in pair]
    return [f"/v1/views/balances/keys/{k}" for k in mix]


def wait_loaded(port: int, n: int, headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        d = httpx.get(f"http://127.0.0.1:{port}/v1/views/balances/aggregate", timeout=30,
                      headers=headers).json()
        nodes = httpx.get(f"http://127.0.0.1:{port}/v1/cluster",
                          headers=headers).json()["nodes"]
        if d["status"] == "OK" and d["groups"] and d["groups"][0]["count(*)"] == n \
                and len(nodes) == 2:
            return
        time.sleep(0.5)
    raise TimeoutError(f"node {port} did not load {n} rows")


def arguments(doc: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--conns", type=int, default=8)
    a = ap.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found (Debian: apt-get install -y wrk)")
    return a


def paired(a: argparse.Namespace, variants: dict[str, list[str]],
           headers: dict[str, dict[str, str] | None],
           cpu: dict[str, list[float]] | None = None) -> tuple[list[float], dict[str, float]]:
    """Two clusters (node flags per variant), the same lookups to each in alternating
    back-to-back pairs: the per-pair ratios first/second and each variant's median.
    ``cpu``, when given, gets each run's server CPU per lookup (us) per variant."""
    first, second = variants
    root = Path(tempfile.mkdtemp(prefix="bench-paired-"))
    broker = bench_broker().start()
    clusters: dict[str, list[NodeProc]] = {}
    try:
        ensure_topics({"bootstrap.servers": broker.bootstrap_servers},
                      {"bl-balances-changelog": 3})
        data = rows(a.keys)
        produce_rows(broker.bootstrap_servers, "bl-balances-changelog", BALANCES, data)
        clusters = {v: start_cluster(broker.bootstrap_servers, root, f"c{i}", extra)
                    for i, (v, extra) in enumerate(variants.items())}
        for v, nodes in clusters.items():
            for n in nodes:
                wait_ready(n.port, 180)
            wait_loaded(nodes[0].port, a.keys, headers[v])
        keys = [r["account"] for r in data]
        paths = {v: mixed_paths(nodes[0].port, keys, headers=headers[v])
                 for v, nodes in clusters.items()}
        ratios: list[float] = []
        got: dict[str, list[float]] = {v: [] for v in variants}
        for i in range(a.pairs):
            pair = {}
            for v in ([first, second] if i % 2 == 0 else [second, first]):
                nodes = clusters[v]
                pair[v] = wrk(f"http://127.0.0.1:{nodes[0].port}", paths[v], root, a.conns,
                              a.seconds, pids=[n.proc.pid for n in nodes], headers=headers[v])
                got[v].append(pair[v]["rps"])
                if cpu is not None:
                    cpu.setdefault(v, []).append(pair[v]["cpu_us"])
            ratios.append(pair[first]["rps"] / pair[second]["rps"])
            print(f"pair {i + 1}: {first} {pair[first]['rps']:.0f} req/s, {second} "
                  f"{pair[second]['rps']:.0f} req/s, ratio {ratios[-1]:.2f}", flush=True)
        return ratios, {v: statistics.median(r) for v, r in got.items()}
    finally:
        stop_all(clusters.values(), broker, root)


def main() -> None:
    a = arguments(__doc__)
    ratios, got = paired(a, {"default": [], "warning": ["--log-level", "warning"]},
                         {"default": None, "warning": None})
    med = statistics.median(ratios)
    print(f"lookups/s (local + forwarded, c={a.conns}): default log level "
          f"{got['default']:.0f}, --log-level warning {got['warning']:.0f}; median of "
          f"{a.pairs} paired ratios {med:.2f}x (target >= {TARGET}x: "
          f"{'met' if med >= TARGET else 'NOT met'})")


if __name__ == "__main__":
    main()
