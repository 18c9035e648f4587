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
"""

from __future__ import annotations

import json
import random
import sys
import time
import uuid

BOOTSTRAP = sys.argv[1] if len(sys.argv) > 1 else "localhost:9092"
NODES = sys.argv[2] if len(sys.argv) > 2 else "localhost:9001,localhost:9002,localhost:9003"
TOPIC = "example-page-views"
VIEW = "views_per_country_1m"
USERS = {f"u{i}": ("FR", "DE", "JP", "BR")[i % 4] for i in range(40)}


def produce_events(n: int) -> dict[tuple[str, int], int]:
    """Write ``n`` page views to the input topic; return the expected counts."""
    from confluent_kafka import Producer

    from streamiq.kafka.admin import ensure_topics

    ensure_topics({"bootstrap.servers": BOOTSTRAP}, {TOPIC: 3})
    p = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5})
    rnd = random.Random(7)
    now = int(time.time() * 1000)
    want: dict[tuple[str, int], int] = {}
    for i in range(n):
        user = f"u{rnd.randrange(40)}"
        ts = now - rnd.randrange(180_000)  # within the last three minutes
        p.produce(TOPIC, key=user,
                  value=json.dumps({"user": user, "page": f"/p{i % 5}", "ts": ts}))
        window = ts - ts % 60_000
        want[(USERS[user], window)] = want.get((USERS[user], window), 0) + 1
    p.flush(30)
    return want


def start_job(checkpoint: str) -> object:
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
    from streamiq import Client

    want = produce_events(500)
    query = start_job(f"/tmp/streamiq-example-{uuid.uuid4().hex[:8]}")
    print(f"job started; waiting for {VIEW} on every node ...", flush=True)
    deadline = time.monotonic() + 180
    try:
        for node in NODES.split(","):
            with Client(node) as c:  # any node answers any question
                while True:
                    got = {(w["country"], w["window_start"]): w["views"]
                           for country in ("FR", "DE", "JP", "BR")
                           for w in _windows(c, country)}
                    if got == want:
                        break
                    if time.monotonic() > deadline:
                        sys.exit(f"{node}: {VIEW} did not reach the expected counts")
                    time.sleep(1)
                total = c.aggregate(VIEW, ["sum(views)"], group_by="country")
                print(f"asked {node}: "
                      + ", ".join(f"{g['country']} {g['sum(views)']}"
                                  for g in total["groups"]))
        print("every node answers with the job's exact counts")
    finally:  # stop between micro-batches: a batch cut short logs Spark's abort noise
        query.processAllAvailable()  # type: ignore[attr-defined]
        query.stop()  # type: ignore[attr-defined]


def _windows(c: object, country: str) -> list[dict[str, object]]:
    from streamiq import QueryError

    try:
        return c.windows(VIEW, country, start=0)["windows"]  # type: ignore[attr-defined, no-any-return]
    except QueryError:  # the view is not on this node's catalog yet
        return []


if __name__ == "__main__":
    main()
