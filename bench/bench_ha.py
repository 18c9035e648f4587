"""High-availability benchmark, one run:

1. failover: time from SIGKILL of a key's active owner to the first correct answer for
   that key from a surviving node (its standby), over several kills;
2. restart-to-ready of a node holding N keys (default 1M): from its RocksDB checkpoint
   versus from an empty store (full changelog replay), side by side.

Usage: .venv/bin/python bench/bench_ha.py [--keys 1000000] [--kills 5]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _common import NodeProc, bench_broker, free_port, pct, wait_ready
from changelog import produce_rows

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES


def _args(bootstrap: str, cluster: str, state: Path, standbys: int) -> list[str]:
    return ["--bootstrap-servers", bootstrap, "--cluster", cluster, "--topic-prefix",
            f"{cluster}-", "--app", "bank", "--state-dir", str(state), "--log-level", "warning",
            "--standby-replicas", str(standbys)]


def failover(bootstrap: str, root: Path, kills: int) -> list[float]:
    cluster = "failover"
    topic = f"{cluster}-{BALANCES.changelog_topic}"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    produce_rows(bootstrap, topic, BALANCES, ({"account": f"a{i}", "balance": i, "count": 1,
                                                "last_update": 0} for i in range(10_000)))
    args = _args(bootstrap, cluster, root / "failover", 1)
    nodes = {p: NodeProc(p, args, root / f"logs/n{p}.log") for p in
             (free_port(), free_port(), free_port())}
    times: list[float] = []
    try:
        for port in nodes:
            wait_ready(port)
        client = httpx.Client(timeout=5)
        for k in range(kills):
            key = f"a{k * 37}"
            any_port = next(iter(nodes))
            owner = int(client.get(f"http://127.0.0.1:{any_port}/v1/metadata/balances/{key}")
                        .json()["active"].rsplit(":", 1)[1])
            survivor = next(p for p in nodes if p != owner)
            nodes[owner].kill()
            t0 = time.monotonic()
            while True:
                r = client.get(f"http://127.0.0.1:{survivor}/account/{key}")
                if r.status_code == 200 and r.json()["value"]["balance"] == k * 37:
                    break
            times.append(time.monotonic() - t0)
            nodes[owner] = NodeProc(owner, args, root / f"logs/n{owner}.log")  # restart
            wait_ready(owner)
            time.sleep(2)  # let membership settle before the next kill
    finally:
        for n in nodes.values():
            n.stop()
    return times


def restart(bootstrap: str, root: Path, keys: int) -> tuple[float, float, float]:
    cluster = "restart"
    topic = f"{cluster}-{BALANCES.changelog_topic}"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    t0 = time.monotonic()
    produce_rows(bootstrap, topic, BALANCES, ({"account": f"a{i}", "balance": i, "count": 1,
                                                "last_update": 0} for i in range(keys)))
    print(f"  produced {keys} changelog rows in {time.monotonic() - t0:.1f}s", flush=True)
    state = root / "restart"
    args = _args(bootstrap, cluster, state, 0)
    port = free_port()

    def run_until_ready() -> float:
        n = NodeProc(port, args, root / "logs/restart.log")
        try:
            return wait_ready(port)
        finally:
            n.stop()

    first = run_until_ready()           # initial restore
    from_checkpoint = run_until_ready()  # resume from the local checkpoint
    shutil.rmtree(state)
    from_empty = run_until_ready()       # full replay into an empty store
    return first, from_checkpoint, from_empty


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--kills", type=int, default=5)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="streamiq-bench-ha-"))
    with bench_broker() as broker:
        times = failover(broker.bootstrap_servers, root, a.kills)
        print("failover: SIGKILL of the active owner -> first correct answer from a survivor")
        print(f"  samples {len(times)}  p50 {pct(times, 50) * 1000:.1f} ms  "
              f"max {max(times) * 1000:.1f} ms  (target < 2000 ms)")
        first, ckpt, empty = restart(broker.bootstrap_servers, root, a.keys)
        print(f"restart-to-ready, node holding {a.keys} keys:")
        print(f"  first start (restore) {first:6.2f} s")
        print(f"  from checkpoint       {ckpt:6.2f} s")
        print(f"  from empty store      {empty:6.2f} s")
        print(f"  ratio empty/checkpoint {empty / ckpt:5.1f}x")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
