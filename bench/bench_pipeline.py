"""Pipeline benchmark, one bounded run (~6-7 minutes on 2 cores; ``--only sink`` ~3).

Setup: an embedded broker on a free port; ``bank`` transactions (JSON, 1000 accounts)
in a 3-partition topic; Spark ``local[2]`` with :func:`streamiq.pipeline.session.spark_session`.

0. The sink against Spark's ``noop`` (run first): the integration test's user query
   (``tests/user_query.py``: Spark's ``kafka`` source,
   ``from_json``, join with a static table, ``groupBy`` of (country, page) with three
   aggregates, update mode) over the same ``--events`` page views (200 keys),
   ``--cap`` records per micro-batch, through ``streamiq.sink`` and through ``noop``
   (before and after: the mean is the baseline), steady events/s excluding each run's
   first batch, after ``--warm-events`` records went through both. Prints the ratio
   (target >= 0.8).
1. Throughput, side by side on the same topic in the same run:
   * a plain confluent-kafka consumer reading every record (``consume(10000)``
     batches), measured before and after the pipeline (the mean is the baseline: the
     machine's neighbours move both);
   * the pipeline: Spark's ``kafka`` source -> from_json + validation -> ``balances``
     aggregation (stateful, update mode) -> changelog sink (rows + markers), run until
     the whole topic is reflected, ``--cap`` records per micro-batch
     (``maxOffsetsPerTrigger``). It runs warm, as a long-lived pipeline does: after the
     trickle phase and after ``--warm-events`` records went through the same plan
     (the JIT compiles Spark's generated code and JSON parsing only under volume).
2. Trickle latency (run first): a few records every 200 ms; per-micro-batch duration from the query
   progress (p50/p99) and ingest -> changelog latency (changelog record time minus the
   transaction's ``ts``, for rows whose last update arrived in that batch).

Usage: .venv/bin/python bench/bench_pipeline.py [--events 1000000] [--cap 200000]
       [--warm-events 300000] [--trickle-s 30] [--only all|sink]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_broker, pct

from streamiq.kafka.admin import ensure_topics
from streamiq.pipeline.runner import build_view_stream
from streamiq.views import bank
from streamiq.views.base import MARKER_HEADER

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import user_query  # the integration test's user query (join + aggregate), shared

__all__ = ["main"]


def produce(bs: str, topic: str, n: int, accounts: int = 1000) -> None:
    rnd = random.Random(1)
    now = int(time.time() * 1000)

    def txn(i: int) -> tuple[str, str]:
        a = f"acct-{rnd.randrange(accounts)}"
        return a, json.dumps({"account": a, "amount": rnd.randrange(-100, 100), "ts": now + i})

    produce_all(bs, topic, (txn(i) for i in range(n)))


def produce_all(bs: str, topic: str, records: Iterable[tuple[str, str]]) -> None:
    """Produce (key, value) records as fast as the producer takes them."""
    p = Producer({"bootstrap.servers": bs, "linger.ms": 20, "batch.num.messages": 10000,
                  "partitioner": "murmur2_random", "queue.buffering.max.messages": 500000})
    for k, v in records:
        while True:
            try:
                p.produce(topic, key=k, value=v)
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


def run_query(spark: Any, bs: str, topic: str, ckpt: str,
              max_per_trigger: int | None) -> tuple[Any, str]:
    import streamiq

    view = view_for(topic)
    kafka = {"bootstrap.servers": bs}
    q = (streamiq.sink(build_view_stream(spark, view, kafka, max_per_trigger))
         .option("view", view.name).option("key", "account")
         .option("kafka.bootstrap.servers", bs).option("cluster", "bench")
         .option("checkpointLocation", ckpt).trigger(processingTime="0 seconds").start())
    return q, view.changelog_topic


def user_query_run(spark: Any, bs: str, topic: str, cap: int | None, sink: str) -> Any:
    """The integration test's user query, through the streamiq sink or Spark's noop."""
    df = user_query.page_views(spark, bs, topic, cap)
    ckpt = tempfile.mkdtemp(prefix="bench-ck-")
    if sink == "noop":
        return (df.writeStream.format("noop").outputMode("update")
                .option("checkpointLocation", ckpt).trigger(processingTime="0 seconds").start())
    return user_query.start(spark, df, bs, f"bench_views_{uuid.uuid4().hex[:6]}", "bench", ckpt)


def produce_views(bs: str, topic: str, n: int) -> None:
    rnd = random.Random(3)

    def view(i: int) -> tuple[str, str]:
        u = f"u{rnd.randrange(user_query.USERS)}"
        return u, json.dumps({"user": u, "page": f"/p{rnd.randrange(50)}",
                              "ms": rnd.randrange(500), "ts": 1_700_000_000_000 + i})

    produce_all(bs, topic, (view(i) for i in range(n)))


def sink_vs_noop(spark: Any, bs: str, n: int, cap: int, warm: int) -> dict[str, float]:
    """Steady events/s of the user query through the sink and through noop (noop before
    and after: the mean is the baseline), warmed at volume first."""
    stamp = uuid.uuid4().hex[:6]
    topic, warm_topic = f"bench-views-{stamp}", f"bench-views-warm-{stamp}"
    ensure_topics({"bootstrap.servers": bs}, {topic: 3, warm_topic: 3})
    produce_views(bs, topic, n)
    produce_views(bs, warm_topic, warm)
    for sink in ("noop", "streamiq"):  # JIT and Python workers warm for both sinks
        throughput(user_query_run(spark, bs, warm_topic, cap, sink), warm)
    out = {}
    for label, sink in (("noop", "noop"), ("sink", "streamiq"), ("noop2", "noop")):
        out[label] = throughput(user_query_run(spark, bs, topic, cap, sink), n)["steady"]
        print(f"user query -> {sink}: {out[label]:,.0f} events/s (steady)", flush=True)
    out["ratio"] = out["sink"] / statistics.mean([out["noop"], out["noop2"]])
    return out


def pipeline_throughput(spark: Any, bs: str, topic: str, n: int,
                        cap: int | None) -> dict[str, float]:
    q, _ = run_query(spark, bs, topic, tempfile.mkdtemp(prefix="bench-ck-"), cap)
    return throughput(q, n)


def throughput(q: Any, n: int) -> dict[str, float]:
    """Run ``q`` until it read ``n`` records; wall and steady (batches 2..) events/s."""
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
    topic = f"bench-trickle-{uuid.uuid4().hex[:8]}"
    ensure_topics({"bootstrap.servers": bs}, {topic: 3})
    q, changelog = run_query(spark, bs, topic, tempfile.mkdtemp(prefix="bench-ck-"), None)
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
    c.assign([TopicPartition(changelog, i, 0) for i in range(3)])
    eof: set[int] = set()
    lat: list[float] = []
    while len(eof) < 3:
        for m in c.consume(1000, timeout=1):
            if m.error():
                eof.add(m.partition())
            elif not any(k == MARKER_HEADER for k, _ in m.headers() or []):
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
    ap.add_argument("--only", choices=("all", "sink"), default="all",
                    help="sink: only the user query through the sink vs noop")
    args = ap.parse_args(argv)
    from streamiq.pipeline.session import spark_session

    with bench_broker() as broker:
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
            sink = sink_vs_noop(spark, bs, args.events, args.cap, args.warm_events)
            print(f"user query through the sink / noop: {sink['ratio']:.2f}x "
                  "(target >= 0.8)", flush=True)
            if args.only == "sink":
                return
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
        ("user query -> streamiq sink, steady", f"{sink['sink']:,.0f} events/s"),
        ("user query -> noop, steady (before / after)",
         f"{sink['noop']:,.0f} / {sink['noop2']:,.0f} events/s"),
        ("ratio sink/noop", f"{sink['ratio']:.2f}   target >= 0.8"),
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
