"""What folding transfers costs the balances plan (issue 46), side by side in one run.

In-process Spark (``local[2]``), batch frames of the Kafka source's columns made by
``spark.range`` (JSON values, 1000 accounts, 3 input partitions), run through the
pipeline's own plan (``queries.view_frame``: from_json, validation, the transform with
the input-position aggregates) into Spark's ``noop`` sink. Three plans over ``--events``
records, ``--rounds`` interleaved rounds, the median of each:

* ``before``: the deposits-only plan (no ``to`` in the schema, no transfer checks: the
  plan before transfers) over deposits;
* ``deposits``: the transfer plan over the same deposits (the checks, an ``explode``
  of one leg each);
* ``transfers``: the transfer plan over transfers (two legs each: twice the rows into
  the aggregation).

Prints each plan's seconds and records/s, and the ratios to ``before``. A batch run,
not a stream: it measures the plan's CPU per record, not freshness.

Usage: .venv/bin/python bench/bench_transfers.py [--events 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from typing import Any

from streamiq.pipeline.queries import view_frame
from streamiq.pipeline.session import spark_session
from streamiq.views import bank

__all__ = ["main"]

BEFORE = dataclasses.replace(
    bank.BALANCES, value_schema="account STRING, amount BIGINT, ts BIGINT",
    checks=tuple(c for c in bank.BALANCES.checks if c not in bank.TRANSFER_CHECKS))
INPUTS = [(bank.TOPIC, p) for p in range(3)]


def raw(spark: Any, n: int, transfers: bool) -> Any:
    """``n`` records as the Kafka source gives them; transfers to the next account."""
    from pyspark.sql import functions as F

    account = F.concat(F.lit("a"), (F.col("id") % 1000).cast("string"))
    fields = [account.alias("account"), (F.col("id") % 100).alias("amount"),
              F.col("id").alias("ts")]
    if transfers:
        fields.append(F.concat(F.lit("a"), ((F.col("id") + 1) % 1000).cast("string")).alias("to"))
    return spark.range(n).select(
        F.lit(b"k").alias("key"), F.to_json(F.struct(*fields)).cast("binary").alias("value"),
        F.lit(bank.TOPIC).alias("topic"), (F.col("id") % 3).cast("int").alias("partition"),
        F.col("id").alias("offset"), F.current_timestamp().alias("timestamp"),
        F.lit(0).alias("timestampType"))


def seconds(frame: Any) -> float:
    t = time.perf_counter()
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="records per plan and round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    args = ap.parse_args(argv)
    spark = spark_session("local[2]", app_name="bench-transfers", shuffle_partitions=3)
    plans = {"before": view_frame(raw(spark, args.events, False), BEFORE, INPUTS),
             "deposits": view_frame(raw(spark, args.events, False), bank.BALANCES, INPUTS),
             "transfers": view_frame(raw(spark, args.events, True), bank.BALANCES, INPUTS)}
    for frame in plans.values():  # warm: JIT, codegen
        seconds(frame)
    times: dict[str, list[float]] = {k: [] for k in plans}
    for _ in range(args.rounds):
        for name, frame in plans.items():
            times[name].append(seconds(frame))
    base = statistics.median(times["before"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:9} {med:7.2f} s  {args.events / med:11,.0f} records/s  "
              f"x{med / base:.2f} of before  (rounds: {', '.join(f'{t:.2f}' for t in ts)})")
    spark.stop()


if __name__ == "__main__":
    main()
