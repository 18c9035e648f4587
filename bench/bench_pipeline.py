"""Pipeline benchmark, one bounded run (~4-5 minutes on 2 cores).

Setup: an embedded broker on a free port; ``bank`` transactions (JSON, 1000 accounts)
in a 3-partition topic; Spark ``local[2]`` with :func:`streamiq.pipeline.session.spark_session`.

1. Throughput, side by side on the same topic in the same run:
   * a plain confluent-kafka consumer reading every record (``consume(10000)``
     batches), measured before and after the pipeline (the mean is the baseline: the
     machine's neighbours move both);
   * the pipeline: ``streamiq-kafka`` source -> from_json + validation -> ``balances``
     aggregation (stateful, update mode) -> changelog sink (rows + markers), run until
     the whole topic is reflected, ``--cap`` records per micro-batch
     (``maxOffsetsPerTrigger``). It runs warm, as a long-lived pipeline does: after the
     trickle phase and after ``--warm-events`` records went through the same plan
     (the JIT compiles Spark's generated code and JSON parsing only under volume).
2. Trickle latency (run first): a few records every 200 ms; per-micro-batch duration from the query
   progress (p50/p99) and ingest -> changelog latency (changelog record time minus the
   transaction's ``ts``, for rows whose last update arrived in that batch).

Usage: .venv/bin/python bench/bench_pipeline.py [--events 1000000] [--cap 200000]
       [--warm-events 300000] [--trickle-s 30]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import free_port, pct

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.broker import EmbeddedBroker
from streamiq.pipeline.runner import build_view_stream
from streamiq.pipeline.sink import ChangelogSink
from streamiq.views import bank

__all__ = ["main"]


def produce(bs: str, topic: str, n: int, accounts: int = 1000) -> None:
    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.num.messages": 10000,
                  "partitioner": "murmur2_random", "queue.buffering.max.messages": 500000})
    rnd = random.Random(1)
    now = int(time.time() * 1000)
    for i in range(n):
        a = f"acct-{rnd.randrange(accounts)}"
        v = json.dumps({"account": a, "amount": rnd.randrange(-100, 100), "ts": now + i})
        while True:
            try:
                p.produce(topic, key=a, value=v)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(60) == 0


def plain_consumer(bs: str, topic: str, n: int) -> float:
    c = Consumer({"bootstrap.servers": bs, "group.id": "bench-plain", "fetch.wait.max.ms": 10,
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(3)])
    got, t0 = 0, time.perf_counter()
    while got < n:
        got += sum(1 for m in c.consume(10000, timeout=1.0) if m.error() is None)
    dt = time.perf_counter() - t0
    c.close()
    return n / dt


def view_for(topic: str) -> Any:
    import dataclasses

    return dataclasses.replace(bank.BALANCES, name=f"balances-{topic}", source_topics=(topic,))


def run_query(spark: Any, bs: str, topic: str, ckpt: str, max_per_trigger: int | None
              ) -> tuple[Any, ChangelogSink]:
    view = view_for(topic)
    ensure_topics({"bootstrap.servers": bs}, {view.changelog_topic: 3})
    kafka = {"bootstrap.servers": bs}
    sink = ChangelogSink(view, kafka, 3, ckpt, spark)
    q = (build_view_stream(spark, view, kafka, max_per_trigger).writeStream
         .outputMode("update").foreachBatch(sink).option("checkpointLocation", ckpt)
         .trigger(processingTime="0 seconds").start())
    return q, sink


def pipeline_throughput(spark: Any, bs: str, topic: str, n: int, cap: int | None
                        ) -> dict[str, float]:
    q, _ = run_query(spark, bs, topic, tempfile.mkdtemp(prefix="bench-ck-"), cap)
    t0 = time.perf_counter()
    while True:
        prog = [p for p in q.recentProgress if p["numInputRows"] > 0]
        if sum(p["numInputRows"] for p in prog) >= n:
            break
        if q.exception():
            raise RuntimeError(q.exception())
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    q.stop()
    first = prog[0]
    rest = prog[1:]
    steady_rows = sum(p["numInputRows"] for p in rest)
    steady_ms = sum(p["durationMs"]["triggerExecution"] for p in rest)
    parts = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
    breakdown = {k: statistics.median(p["durationMs"].get(k, 0) for p in rest or prog)
                 for k in parts}
    print(f"bulk batch median ms by phase: {breakdown}", flush=True)
    return {"wall": n / wall, "steady": steady_rows / (steady_ms / 1000) if steady_ms else 0,
            "batches": len(prog), "first_batch_s": first["durationMs"]["triggerExecution"] / 1000}


def trickle(spark: Any, bs: str, seconds: float) -> dict[str, list[float]]:
    topic = f"bench-trickle-{int(time.time())}"
    ensure_topics({"bootstrap.servers": bs}, {topic: 3})
    q, sink = run_query(spark, bs, topic, tempfile.mkdtemp(prefix="bench-ck-"), None)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0, "partitioner": "murmur2_random"})
    rnd = random.Random(2)
    # warm up (JIT, Python workers), then measure
    end_warm = time.monotonic() + 15
    t_start = None
    while True:
        now = time.monotonic()
        if now > end_warm and t_start is None:
            t_start = time.time() * 1000
        if t_start is not None and now > end_warm + seconds:
            break
        for _ in range(3):
            a = f"acct-{rnd.randrange(50)}"
            p.produce(topic, key=a, value=json.dumps(
                {"account": a, "amount": 1, "ts": int(time.time() * 1000)}))
        p.flush()
        time.sleep(0.2)
    time.sleep(3)
    q.stop()
    assert t_start is not None
    measured = [pr for pr in q.recentProgress
                if pr["numInputRows"] > 0 and _ts(pr["timestamp"]) >= t_start]
    durations = [float(pr["durationMs"]["triggerExecution"]) for pr in measured]
    parts = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
    if measured:
        print("trickle batch median ms by phase:", {k: statistics.median(
            pr["durationMs"].get(k, 0) for pr in measured) for k in parts}, flush=True)
    c = Consumer({"bootstrap.servers": bs, "group.id": "bench-lat", "enable.partition.eof": True})
    c.assign([TopicPartition(sink.topic, i, 0) for i in range(3)])
    eof: set[int] = set()
    lat: list[float] = []
    while len(eof) < 3:
        for m in c.consume(1000, timeout=1):
            if m.error():
                eof.add(m.partition())
            elif m.key() is not None:
                v = json.loads(m.value())
                if v["last_update"] >= t_start:
                    lat.append(m.timestamp()[1] - v["last_update"])
    c.close()
    return {"batch_ms": durations, "ingest_to_changelog_ms": lat}


def _ts(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="measured topic size")
    ap.add_argument("--cap", type=int, default=200_000,
                    help="maxOffsetsPerTrigger of the measured run (micro-batch size)")
    ap.add_argument("--warm-events", type=int, default=300_000,
                    help="records pushed through the pipeline before measuring (JIT warm-up)")
    ap.add_argument("--trickle-s", type=float, default=30.0)
    args = ap.parse_args(argv)
    from streamiq.pipeline.session import spark_session

    with EmbeddedBroker("127.0.0.1", free_port()) as broker:
        bs = broker.bootstrap_servers
        stamp = int(time.time())
        topic, warm = f"bench-bank-{stamp}", f"bench-warm-{stamp}"
        ensure_topics({"bootstrap.servers": bs}, {topic: 3, warm: 3})
        t0 = time.perf_counter()
        produce(bs, topic, args.events)
        prod_rate = args.events / (time.perf_counter() - t0)
        print(f"produced {args.events} events at {prod_rate:,.0f}/s", flush=True)
        produce(bs, warm, args.warm_events)
        spark = spark_session("local[2]", app_name="streamiq-bench")
        try:
            plain = [plain_consumer(bs, topic, args.events)]
            print(f"plain consumer: {plain[0]:,.0f} events/s", flush=True)
            tr = trickle(spark, bs, args.trickle_s)  # also warms the JVM and Python workers
            # JIT warm-up at volume: the same plan over other records, result discarded
            pipeline_throughput(spark, bs, warm, args.warm_events, None)
            pipe = pipeline_throughput(spark, bs, topic, args.events, args.cap)
            print(f"pipeline: {pipe}", flush=True)
            plain.append(plain_consumer(bs, topic, args.events))  # neighbours change: twice
            print(f"plain consumer (again): {plain[1]:,.0f} events/s", flush=True)
        finally:
            spark.stop()
    base = statistics.mean(plain)
    b, lat = tr["batch_ms"], tr["ingest_to_changelog_ms"]
    rows = [
        ("plain confluent-kafka consumer (mean of 2)",
         f"{base:,.0f} events/s ({plain[0]:,.0f} / {plain[1]:,.0f})"),
        ("pipeline, wall (start -> all reflected)", f"{pipe['wall']:,.0f} events/s"),
        ("pipeline, steady (excl. 1st batch)", f"{pipe['steady']:,.0f} events/s"),
        ("ratio pipeline/plain (wall)", f"{pipe['wall'] / base:.2f}"),
        ("ratio pipeline/plain (steady)", f"{pipe['steady'] / base:.2f}   target >= 0.5"),
        ("micro-batches (cap) / 1st batch", f"{pipe['batches']:.0f} ({args.cap:,}) / "
                                            f"{pipe['first_batch_s']:.1f} s"),
        ("trickle micro-batch p50 / p99", f"{pct(b, 50):.0f} / {pct(b, 99):.0f} ms "
                                         f"(n={len(b)})"),
        ("trickle ingest->changelog p50 / p99", f"{pct(lat, 50):.0f} / {pct(lat, 99):.0f} ms "
                                               f"(n={len(lat)})"),
    ]
    w = max(len(r[0]) for r in rows)
    print()
    print(f"{'metric'.ljust(w)}  value")
    print(f"{'-' * w}  {'-' * 28}")
    for k, v in rows:
        print(f"{k.ljust(w)}  {v}")
    if b:
        print(f"\ntrickle batch ms: mean {statistics.mean(b):.0f}, min {min(b):.0f}, "
              f"max {max(b):.0f}")


if __name__ == "__main__":
    main(sys.argv[1:])
