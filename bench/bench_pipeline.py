"""Pipeline benchmark, one bounded run (~8-10 minutes on 2 cores; ``--only sink`` ~3).

Setup: an embedded broker on a free port; ``bank`` transactions (JSON, 1000 accounts)
in a 3-partition topic; Spark ``local[10]`` with
:func:`streamiq.pipeline.session.spark_session` and real-time mode's session settings.

0. The sink against Spark's ``noop`` (run first): the integration test's user query
   (``tests/user_query.py``: Spark's ``kafka`` source, ``from_json``, join with a static
   table, ``groupBy`` of (country, page) with three aggregates, update mode; micro-batch,
   as the sink runs it: real-time mode refuses its sort-merge join) over the same
   ``--events`` page views (200 keys), ``--cap`` records per micro-batch, through
   ``streamiq.sink`` and through ``noop`` (before and after: the mean is the baseline),
   steady events/s excluding each run's first batch, after ``--warm-events`` records
   went through both. Prints the ratio (target >= 0.8).
1. Throughput of the ``balances`` view as ``streamiq pipeline`` runs it (Spark's
   ``kafka`` source -> from_json + validation -> aggregation with the per-row input
   positions -> changelog records -> Spark's Kafka sink), side by side on the same
   topic in the same run:
   * a plain confluent-kafka consumer reading every record (``consume(10000)``
     batches), measured before and after (the mean is the baseline: the machine's
     neighbours move both);
   * micro-batch mode (its settings: one shuffle partition, the HDFS state store),
     ``--cap`` records per micro-batch, steady (excluding the first batch) and wall;
   * real-time mode (RocksDB, 3 shuffle partitions, batches of ``--realtime-batch-s``):
     wall time from the query's start until its changelog holds every input record's
     update (in real-time mode every input record updates its key's row, and each
     update is a changelog record).
   Each mode runs warm: ``--warm-events`` records go through the same plan first.

Usage: .venv/bin/python bench/bench_pipeline.py [--events 1000000] [--cap 200000]
       [--warm-events 300000] [--only all|sink]
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
from _common import bench_broker

from streamiq.kafka.admin import ensure_topics
from streamiq.pipeline import modes
from streamiq.pipeline.queries import build_view_stream, start_view
from streamiq.pipeline.stopnoise import stop_noise
from streamiq.views import bank

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


def run_query(spark: Any, bs: str, topic: str, ckpt: str, max_per_trigger: int | None,
              mode: str = modes.MICRO_BATCH) -> tuple[Any, str]:
    """The view's query as ``streamiq pipeline`` starts it, in ``mode``: (query, changelog)."""
    view = view_for(topic)
    kafka = {"bootstrap.servers": bs}
    ensure_topics(kafka, {view.changelog_topic: 3})
    inputs = [(topic, p) for p in range(3)]
    conf = {**modes.session_conf(mode), "spark.sql.shuffle.partitions":
            str(modes.shuffle_partitions(mode, 3))}
    old = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        if not k.startswith("spark.shuffle.streaming"):  # set when the session was made
            spark.conf.set(k, v)
    try:
        rows = build_view_stream(spark, view, kafka, max_per_trigger, (topic,), inputs,
                                 mode == modes.MICRO_BATCH)
        q = start_view(rows, view, inputs, kafka, view.changelog_topic, ckpt,
                       modes.trigger(mode, REALTIME_BATCH_S, 0))
    finally:
        for k, was in old.items():
            if was is not None and not k.startswith("spark.shuffle.streaming"):
                spark.conf.set(k, was)
    return q, view.changelog_topic


REALTIME_BATCH_S = 30


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


def realtime_throughput(spark: Any, bs: str, topic: str, n: int) -> float:
    """Wall events/s of the view in real-time mode: start to every update on the
    changelog (its records, counted by the partitions' ends, markers aside)."""
    t0 = time.perf_counter()
    q, changelog = run_query(spark, bs, topic, tempfile.mkdtemp(prefix="bench-ck-"), None,
                             modes.REAL_TIME)
    c = Consumer({"bootstrap.servers": bs, "group.id": "bench-ends"})
    try:
        while _written(c, changelog) < n:
            if q.exception():
                raise RuntimeError(q.exception())
            time.sleep(0.1)
        wall = time.perf_counter() - t0
    finally:
        c.close()
        stop_noise(spark).arm()  # its shuffle readers' "fatal error" at the stop: no news
        q.stop()
    return n / wall


def _written(c: Any, topic: str) -> int:
    """Records on ``topic``: the partitions' high watermarks (markers come at batch ends
    only, and there are 3 per batch)."""
    return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
               for p in range(3))


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


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="measured topic size")
    ap.add_argument("--cap", type=int, default=200_000,
                    help="maxOffsetsPerTrigger of the micro-batch runs (micro-batch size)")
    ap.add_argument("--warm-events", type=int, default=300_000,
                    help="records pushed through each plan before measuring (JIT warm-up)")
    ap.add_argument("--only", choices=("all", "sink"), default="all",
                    help="sink: only the user query through the sink vs noop")
    args = ap.parse_args(argv)
    from streamiq.pipeline.session import spark_session

    with bench_broker() as broker:
        bs = broker.bootstrap_servers
        stamp = int(time.time())
        topic, warm = f"bench-bank-{stamp}", f"bench-warm-{stamp}"
        ensure_topics({"bootstrap.servers": bs}, {topic: 3, warm: 3, f"{warm}-rt": 3})
        t0 = time.perf_counter()
        produce(bs, topic, args.events)
        prod_rate = args.events / (time.perf_counter() - t0)
        print(f"produced {args.events} events at {prod_rate:,.0f}/s", flush=True)
        produce(bs, warm, args.warm_events)
        produce(bs, f"{warm}-rt", args.warm_events)
        conf: dict[str, Any] = modes.session_conf(modes.REAL_TIME)
        spark = spark_session("local[10]", app_name="streamiq-bench", **conf)
        try:
            sink = sink_vs_noop(spark, bs, args.events, args.cap, args.warm_events)
            print(f"user query through the sink / noop: {sink['ratio']:.2f}x "
                  "(target >= 0.8)", flush=True)
            if args.only == "sink":
                return
            plain = [plain_consumer(bs, topic, args.events)]
            print(f"plain consumer: {plain[0]:,.0f} events/s", flush=True)
            # JIT warm-up at volume: the same plans over other records, results discarded
            pipeline_throughput(spark, bs, warm, args.warm_events, None)
            realtime_throughput(spark, bs, f"{warm}-rt", args.warm_events)
            mb = pipeline_throughput(spark, bs, topic, args.events, args.cap)
            print(f"micro-batch: {mb}", flush=True)
            rt = realtime_throughput(spark, bs, topic, args.events)
            print(f"real-time: {rt:,.0f} events/s (wall)", flush=True)
            plain.append(plain_consumer(bs, topic, args.events))  # neighbours change: twice
            print(f"plain consumer (again): {plain[1]:,.0f} events/s", flush=True)
        finally:
            spark.stop()
    base = statistics.mean(plain)
    rows = [
        ("user query -> streamiq sink, steady", f"{sink['sink']:,.0f} events/s"),
        ("user query -> noop, steady (before / after)",
         f"{sink['noop']:,.0f} / {sink['noop2']:,.0f} events/s"),
        ("ratio sink/noop", f"{sink['ratio']:.2f}   target >= 0.8"),
        ("plain confluent-kafka consumer (mean of 2)",
         f"{base:,.0f} events/s ({plain[0]:,.0f} / {plain[1]:,.0f})"),
        ("micro-batch, steady (excl. 1st batch)", f"{mb['steady']:,.0f} events/s"),
        ("micro-batch, wall (start -> all reflected)", f"{mb['wall']:,.0f} events/s"),
        ("ratio micro-batch/plain (steady)", f"{mb['steady'] / base:.2f}   target >= 1"),
        ("micro-batches (cap) / 1st batch", f"{mb['batches']:.0f} ({args.cap:,}) / "
                                            f"{mb['first_batch_s']:.1f} s"),
        ("real-time, wall (start -> every update out)", f"{rt:,.0f} events/s"),
        ("ratio real-time/plain (wall)", f"{rt / base:.2f}"),
    ]
    w = max(len(r[0]) for r in rows)
    print()
    print(f"{'metric'.ljust(w)}  value")
    print(f"{'-' * w}  {'-' * 28}")
    for k, v in rows:
        print(f"{k.ljust(w)}  {v}")


if __name__ == "__main__":
    main(sys.argv[1:])
