"""A user's own streaming query (not a streamiq App) writing a view through the sink.

``python user_query.py BOOTSTRAP TOPIC VIEW CLUSTER CHECKPOINT``: page views (JSON) read
with Spark's ``kafka`` format, parsed, joined with a static users table, counted per
(country, page) in update mode and written with ``streamiq.sink``. Prints the pipeline's
ready line once the query started, then runs until killed. Shared with bench_pipeline.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from streamiq.pipeline.runner import READY_LINE

__all__ = ["COUNTRIES", "USERS", "country_of", "page_views", "spark_config", "start", "truth"]

USERS = 30  # u0..u29; the static table knows u0..u24 only: the join drops the rest
COUNTRIES = ("FR", "DE", "JP", "BR")


def country_of(user: str) -> str | None:
    i = int(user[1:])
    return COUNTRIES[i % len(COUNTRIES)] if i < 25 else None


def truth(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The view's rows (by changelog key) that ``events`` must produce, computed in Python."""
    want: dict[str, dict[str, Any]] = {}
    for e in events:
        country = country_of(e["user"])
        if country is None:
            continue
        w = want.setdefault(f"{country}|{e['page']}", {
            "country": country, "page": e["page"], "views": 0, "total_ms": 0, "last_seen": 0})
        w["views"] += 1
        w["total_ms"] += e["ms"]
        w["last_seen"] = max(w["last_seen"], e["ts"])
    return want


def page_views(spark: Any, bootstrap: str, topic: str, max_per_trigger: int | None = None
               ) -> Any:
    """The user's query up to the aggregate (no sink)."""
    from pyspark.sql import functions as F

    users = spark.createDataFrame([(f"u{i}", country_of(f"u{i}")) for i in range(25)],
                                  "user STRING, country STRING")
    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest"))
    if max_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_per_trigger))
    events = reader.load().select(F.from_json(
        F.col("value").cast("string"), "user STRING, page STRING, ms BIGINT, ts BIGINT"
    ).alias("e")).select("e.*")
    return (events.join(users, "user")
            .groupBy("country", "page")
            .agg(F.count(F.lit(1)).alias("views"), F.sum("ms").alias("total_ms"),
                 F.max(F.timestamp_millis("ts")).alias("last_seen")))


def start(spark: Any, df: Any, bootstrap: str, view: str, cluster: str, checkpoint: str
          ) -> Any:
    import streamiq

    return (streamiq.sink(df)
            .option("view", view).option("key", "country,page")
            .option("kafka.bootstrap.servers", bootstrap).option("cluster", cluster)
            .outputMode("update").option("checkpointLocation", checkpoint).start())


def spark_config() -> dict[str, Any]:
    """Spark settings from ``STREAMIQ_SPARK_CONFIG`` (JSON), as ``streamiq pipeline``
    takes them: the tests' fast driver JVM (tests/procs.py's FAST_ENV) reaches
    these user programs too (their JVM up and first batch seconds sooner)."""
    raw = os.environ.get("STREAMIQ_SPARK_CONFIG")
    return {str(k): str(v) for k, v in json.loads(raw).items()} if raw else {}


def main(argv: list[str]) -> None:
    from streamiq.pipeline.session import spark_session

    bootstrap, topic, view, cluster, checkpoint = argv
    spark = spark_session("local[2]", app_name="user-query", **spark_config())
    q = start(spark, page_views(spark, bootstrap, topic), bootstrap, view, cluster, checkpoint)
    print(f"{READY_LINE}: user query {q.id}", flush=True)
    q.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
