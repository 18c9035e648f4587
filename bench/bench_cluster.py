"""Pipeline throughput on a 2-worker Spark standalone cluster vs local mode, same run.

Setup: an embedded broker on a free port, ``--events`` bank transactions in a
3-partition topic, and a Spark standalone cluster started from pip's PySpark (a master
and two workers of one core and 1 GB each, ``tests/spark_cluster.py``). Each variant
runs in a process of its own (one Spark driver per process): the bank pipeline
(Spark's ``kafka`` source, JSON parsing and validation, the ``balances``
aggregation, the ``streamiq`` sink) over the whole topic, ``--cap`` records per
micro-batch, after a warm-up pass over ``--warm`` records. Variants alternate
(local, cluster, local, cluster, ... ``--rounds`` each); printed: steady events/s
(micro-batches after the first), wall events/s from query start, and the ratio of the
medians. On this 2-core machine the cluster adds executor JVMs, task shipping and
shuffles over the network on the same two cores: it is expected to be slower, and the
ratio is the overhead a sizing guide needs.

    python bench/bench_cluster.py [--events 300000] [--cap 100000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

from _common import bench_broker
from bench_pipeline import pipeline_throughput, produce

from streamiq.kafka.admin import ensure_topics


def child(a: argparse.Namespace) -> None:
    """One variant: warm up, then measure; prints one JSON line."""
    from streamiq.pipeline.session import spark_session

    spark = spark_session(a.master, app_name="bench-cluster")
    pipeline_throughput(spark, a.bootstrap, a.warm_topic, a.warm, a.cap)
    got = pipeline_throughput(spark, a.bootstrap, a.topic, a.events, a.cap)
    print("RESULT " + json.dumps(got), flush=True)
    spark.stop()


def run_variant(a: argparse.Namespace, master: str, bootstrap: str, topic: str,
                warm_topic: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", "--master", master, "--bootstrap", bootstrap,
         "--topic", topic, "--warm-topic", warm_topic, "--events", str(a.events),
         "--warm", str(a.warm), "--cap", str(a.cap)],
        capture_output=True, text=True, timeout=1800)
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"{master}: no result\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    result: dict[str, float] = json.loads(line[len("RESULT "):])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--warm", type=int, default=100_000)
    ap.add_argument("--cap", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--warm-topic", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a)
        return
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from spark_cluster import SparkStandalone

    root = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    broker = bench_broker().start()
    spark = SparkStandalone(root / "spark", "127.0.0.1", workers=2).start()
    try:
        bs = broker.bootstrap_servers
        got: dict[str, list[dict[str, float]]] = {"local[2]": [], spark.url: []}
        for r in range(a.rounds):
            for master in (["local[2]", spark.url] if r % 2 == 0 else [spark.url, "local[2]"]):
                stamp = uuid.uuid4().hex[:6]
                topic, warm = f"bc-{stamp}", f"bc-warm-{stamp}"
                ensure_topics({"bootstrap.servers": bs}, {topic: 3, warm: 3})
                produce(bs, warm, a.warm)
                produce(bs, topic, a.events)
                res = run_variant(a, master, bs, topic, warm)
                got[master].append(res)
                print(f"round {r + 1} {master}: steady {res['steady']:,.0f} ev/s, wall "
                      f"{res['wall']:,.0f} ev/s, {res['batches']:.0f} batches", flush=True)
        med = {m: statistics.median(x["steady"] for x in v) for m, v in got.items()}
        wall = {m: statistics.median(x["wall"] for x in v) for m, v in got.items()}
        print(f"pipeline, {a.events:,} bank records, {a.cap:,} per micro-batch: local[2] "
              f"{med['local[2]']:,.0f} ev/s steady ({wall['local[2]']:,.0f} wall); standalone "
              f"cluster, 2 workers x 1 core {med[spark.url]:,.0f} ev/s steady "
              f"({wall[spark.url]:,.0f} wall); cluster/local "
              f"{med[spark.url] / med['local[2]']:.2f}x steady, "
              f"{wall[spark.url] / wall['local[2]']:.2f}x wall")
    finally:
        spark.stop()
        broker.stop()


if __name__ == "__main__":
    main()
