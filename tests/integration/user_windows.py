"""A second user query, windowed: page views per page per minute, through the sink.

``python user_windows.py BOOTSTRAP TOPIC VIEW CLUSTER CHECKPOINT``: reads the same page
view events as ``tests/user_query.py`` (Spark's ``kafka`` format), counts them per (page,
1-minute window of the event's ``ts``) in update mode and writes them with
``streamiq.sink``; prints the ready line once the query started, then runs until killed.
"""

from __future__ import annotations

import sys

from streamiq.pipeline.runner import READY_LINE


def main(argv: list[str]) -> None:
    from pyspark.sql import functions as F
    from user_query import spark_config

    import streamiq
    from streamiq.pipeline.session import spark_session

    bootstrap, topic, view, cluster, checkpoint = argv
    spark = spark_session("local[2]", app_name="user-windows", **spark_config())
    events = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").load()
              .select(F.from_json(F.col("value").cast("string"),
                                  "user STRING, page STRING, ms BIGINT, ts BIGINT").alias("e"))
              .select("e.*").withColumn("at", F.timestamp_millis("ts")))
    counts = (events.withWatermark("at", "10 minutes")
              .groupBy(F.window("at", "1 minute"), "page")
              .agg(F.count(F.lit(1)).alias("views")))
    q = (streamiq.sink(counts).option("view", view).option("key", "page")
         .option("kafka.bootstrap.servers", bootstrap).option("cluster", cluster)
         .outputMode("update").option("checkpointLocation", checkpoint).start())
    print(f"{READY_LINE}: user windows {q.id}", flush=True)
    q.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
