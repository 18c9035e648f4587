"""Make an existing Structured Streaming job queryable: add the sink, query any node.

Run it against the demo (`make demo` in another terminal: a broker on localhost:9092,
nodes on 9001-9003; the demo token exported as STREAMIQ_TOKEN), from the project's
virtualenv::

    .venv/bin/python examples/page_views.py
    .venv/bin/python examples/page_views.py BOOTSTRAP NODES   # another cluster's addresses

The job below is written the way a data engineer already writes one, with nothing of
streamiq in it: it reads page-view events from Kafka (JSON, parsed by the job), joins
them with a static table of users, and counts views per country per minute, reading
with Spark's own ``format("kafka")``. The only streamiq line is the sink at the end.
The demo's nodes were started without this module: they find the view on the cluster's
catalog and serve it from every node. The session is the job's own (no PYSPARK_PYTHON:
streamiq's sink is Spark's Kafka sink, no Python worker runs). Its join of a stream with
a table Spark plans as a sort-merge join, which real-time mode does not run: the sink says
so in one line and runs the query in micro-batch mode.

It works on every run against the same demo, and leaves nothing behind that a later run
does not use. The view and its input topic are the example's own and kept from run to
run: a view cannot be taken off a running cluster's catalog, so a view (and topic) per
run would pile up on every node. Each run's job has a checkpoint of its own and reads
the topic from its beginning, so the view counts every run's events; the script expects
exactly that, computing its expected counts from everything the topic holds when the
job starts (earlier runs' events too, kept: the topic is made with no time limit), not
from the events it wrote. What only this run uses, its checkpoint folder (in TMPDIR) and
its Spark query, it removes at the end, whatever happened.

A node that refuses it (no token or a wrong one, 401/403; any answer that waiting will
not change) ends the script at once, before Spark starts, saying why and what to do;
only "the view is not on this node yet" (404 UNKNOWN_VIEW while the job starts) and
answers that may pass by asking again are waited for, up to three minutes.
"""

from __future__ import annotations

import json
import random
import shutil
import sys
import tempfile
import time
from typing import Any

BOOTSTRAP = sys.argv[1] if len(sys.argv) > 1 else "localhost:9092"
NODES = sys.argv[2] if len(sys.argv) > 2 else "localhost:9001,localhost:9002,localhost:9003"
TOPIC = "example-page-views"
VIEW = "views_per_country_1m"
USERS = {f"u{i}": ("FR", "DE", "JP", "BR")[i % 4] for i in range(40)}


def produce_events(n: int) -> None:
    """Write ``n`` page views to the input topic (made on the first run, kept)."""
    from confluent_kafka import Producer

    from streamiq.kafka.admin import ensure_topics

    ensure_topics({"bootstrap.servers": BOOTSTRAP}, {TOPIC: 3}, config={"retention.ms": "-1"})
    p = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5})
    rnd = random.Random()
    now = int(time.time() * 1000)
    for i in range(n):
        user = f"u{rnd.randrange(40)}"
        ts = now - rnd.randrange(180_000)  # within the last three minutes
        p.produce(TOPIC, key=user,
                  value=json.dumps({"user": user, "page": f"/p{i % 5}", "ts": ts}))
    if p.flush(30):
        sys.exit(f"page_views: events not acknowledged by the broker at {BOOTSTRAP}")


def expected_counts() -> dict[tuple[str, int], int]:
    """What the job will count: every event on the topic, earlier runs' too, read here
    from its start to its end (the job starts after this and reads the same)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    from streamiq.kafka.offsets import watermarks

    c = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "page-views-expected",
                  "enable.auto.commit": False})
    try:
        parts = c.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
        ends = {p: watermarks(c, TOPIC, p) for p in parts}
        left = {p for p, (low, high) in ends.items() if high > low}
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in left])
        want: dict[tuple[str, int], int] = {}
        while left:
            m = c.poll(30)
            if m is None or m.error():
                sys.exit(f"page_views: cannot read {TOPIC} back: {m and m.error()}")
            e = json.loads(m.value() or b"{}")
            if e.get("user") in USERS:  # the job's inner join drops any other user
                cell = (USERS[e["user"]], e["ts"] - e["ts"] % 60_000)
                want[cell] = want.get(cell, 0) + 1
            if (m.offset() or 0) + 1 >= ends[m.partition() or 0][1]:
                left.discard(m.partition())
        return want
    finally:
        c.close()


def start_job(checkpoint: str) -> Any:
    """The user's job: its own parsing, a join with a static table, a windowed count."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import streamiq
    from streamiq.pipeline.connector import require_connector

    # Spark's own Kafka source: the spark-sql-kafka-0-10 jars `make install` resolved
    # (spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:<PySpark's
    # version> would fetch them instead)
    spark = (SparkSession.builder.master("local[2]").appName("page-views")
             .config("spark.jars", ",".join(require_connector()))
             .config("spark.sql.shuffle.partitions", "3").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    users = spark.createDataFrame(list(USERS.items()), "user STRING, country STRING")
    events = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", BOOTSTRAP).option("subscribe", TOPIC)
              .option("startingOffsets", "earliest").load()
              .select(F.from_json(F.col("value").cast("string"),
                                  "user STRING, page STRING, ts BIGINT").alias("e"))
              .select("e.*").withColumn("at", F.timestamp_millis("ts")))
    per_country = (events.join(users, "user")
                   .withWatermark("at", "10 minutes")
                   .groupBy(F.window("at", "1 minute"), "country")
                   .agg(F.count(F.lit(1)).alias("views")))
    # the one streamiq line: the view, its key, where the cluster's Kafka is
    return (streamiq.sink(per_country)
            .option("view", VIEW).option("key", "country")
            .option("kafka.bootstrap.servers", BOOTSTRAP)
            .outputMode("update").option("checkpointLocation", checkpoint).start())


def main() -> None:
    from streamiq import Client, QueryError

    nodes = NODES.split(",")
    try:
        with Client(nodes[0]) as c:  # a refused token ends here, before Spark starts
            c.views()
        produce_events(500)
        want = expected_counts()
        checkpoint = tempfile.mkdtemp(prefix="streamiq-example-")
        try:
            query = start_job(checkpoint)
            print(f"job started (checkpoint {checkpoint}); waiting for {VIEW} on every "
                  "node ...", flush=True)
            try:
                check_every_node(nodes, want)
            finally:  # stop between micro-batches: a batch cut short logs Spark's abort
                query.processAllAvailable()
                query.stop()
        finally:
            shutil.rmtree(checkpoint, ignore_errors=True)
    except QueryError as exc:  # a refusal: waiting will not change it
        sys.exit(f"page_views: {exc}")
    except ConnectionError as exc:
        sys.exit(f"page_views: {exc}: is the demo running (make demo), at {NODES}?")
    print("every node answers with the job's exact counts")


def check_every_node(nodes: list[str], want: dict[tuple[str, int], int]) -> None:
    """Ask each node until it answers the expected counts (any node answers any
    question), for at most three minutes in all."""
    from streamiq import Client

    deadline = time.monotonic() + 180
    for node in nodes:
        with Client(node) as c:
            while True:
                got = {(w["country"], w["window_start"]): w["views"]
                       for country in ("FR", "DE", "JP", "BR")
                       for w in _windows(c, country)}
                if got == want:
                    break
                if time.monotonic() > deadline:
                    sys.exit(f"page_views: {node}: {VIEW} did not reach the expected "
                             f"counts in 180 s ({sum(got.values())} views counted of "
                             f"{sum(want.values())})")
                time.sleep(1)
            total = c.aggregate(VIEW, ["sum(views)"], group_by="country")
            print(f"asked {node}: " + ", ".join(f"{g['country']} {g['sum(views)']}"
                                                for g in total["groups"]))


def _windows(c: Any, country: str) -> list[dict[str, Any]]:
    """The country's windows; none while the view is not on this node yet (its catalog
    learns it moments after the job starts) or the node cannot answer for now. Any
    other refusal is raised: waiting would not change it."""
    from streamiq import QueryError

    try:
        return c.windows(VIEW, country, start=0)["windows"]  # type: ignore[no-any-return]
    except QueryError as exc:
        if exc.code == "UNKNOWN_VIEW" or exc.transient:
            return []
        raise


if __name__ == "__main__":
    main()
