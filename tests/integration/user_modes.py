"""A user's own job in both trigger modes, through the sink, with a SparkSession of its own.

``python user_modes.py BOOTSTRAP TOPIC CLUSTER CHECKPOINTS``: the session is built as a
user builds it (``SparkSession.builder``, the connector's jars, a few shuffle partitions;
no streamiq helper, no PYSPARK_PYTHON); page views are counted per page twice, into
view ``rt_<topic>`` with no trigger (the sink runs it in real-time mode) and into view
``mb_<topic>`` with ``trigger(processingTime="0 seconds")`` (micro-batch). Prints the
ready line once both run, then runs until killed.
"""

from __future__ import annotations

import sys

from streamiq.pipeline.runner import READY_LINE


def main(argv: list[str]) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from user_query import spark_config

    import streamiq
    from streamiq.pipeline.connector import require_connector

    bootstrap, topic, cluster, checkpoints = argv
    builder = (SparkSession.builder.master("local[10]").appName("user-modes")
               .config("spark.jars", ",".join(require_connector()))
               .config("spark.sql.shuffle.partitions", "3"))
    for k, v in spark_config().items():  # the tests' fast driver JVM
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    counts = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
              .option("startingOffsets", "earliest").load()
              .select(F.from_json(F.col("value").cast("string"),
                                  "user STRING, page STRING").alias("e"))
              .groupBy("e.page").agg(F.count(F.lit(1)).alias("views")))
    queries = []
    for mode in ("rt", "mb"):
        w = (streamiq.sink(counts).option("view", f"{mode}_{topic}").option("key", "page")
             .option("kafka.bootstrap.servers", bootstrap).option("cluster", cluster)
             .outputMode("update").option("checkpointLocation", f"{checkpoints}/{mode}"))
        if mode == "mb":
            w = w.trigger(processingTime="0 seconds")
        queries.append(w.start())
    print(f"{READY_LINE}: user modes {[str(q.id) for q in queries]}", flush=True)
    queries[0].awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1:])
