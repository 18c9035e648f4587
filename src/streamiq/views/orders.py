"""Seeds 001/002: orders by store and type, in total and per 1-minute window."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from streamiq.views.base import App, View
from streamiq.views.limits import EVENT_TS, ORDER_AMOUNT

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["APP", "ORDER_COUNTS", "ORDER_COUNTS_1M", "ORDER_TYPES", "TOPIC"]

TOPIC = "orders"
ORDER_TYPES = ("GENERAL", "RESTAURANT")
_SCHEMA = "order_id STRING, store STRING, type STRING, amount DOUBLE, ts BIGINT"
_REQUIRED = ("order_id", "store", "type", "amount", "ts")
#: the views' columns as the sink writes them (checked by the nodes: views/rows.py)
_TYPES = {"store": "string", "type": "string", "count": "bigint", "revenue": "double"}
_EXAMPLE = {"order_id": "warmup", "store": "warmup", "type": "GENERAL", "amount": 0.0, "ts": 0}
_CHECKS = (
    ("type IN ('GENERAL', 'RESTAURANT')", "type must be GENERAL or RESTAURANT"),
    ("length(store) > 0", "empty store"),
    ORDER_AMOUNT.check("amount"),  # finite too: the validation layer checks every double
    EVENT_TS.check("ts"),  # the event time of order_counts_1m: timestamp_millis(ts)
)


def _counts(df: DataFrame, extra: Mapping[str, Column] | None = None) -> DataFrame:
    from pyspark.sql import functions as F

    return df.groupBy("store", "type").agg(
        F.count(F.lit(1)).alias("count"), F.sum("amount").alias("revenue"),
        *[c.alias(n) for n, c in (extra or {}).items()],
    )


def _counts_1m(df: DataFrame, extra: Mapping[str, Column] | None = None) -> DataFrame:
    from pyspark.sql import functions as F

    w = F.window("event_time", "1 minute")
    agg = df.withWatermark("event_time", "1 minute").groupBy(w, "store", "type").agg(
        F.count(F.lit(1)).alias("count"), F.sum("amount").alias("revenue"),
        *[c.alias(n) for n, c in (extra or {}).items()],
    )
    return agg.select(
        "store", "type",
        F.unix_millis(F.col("window.start")).alias("window_start"),
        F.unix_millis(F.col("window.end")).alias("window_end"),
        "count", "revenue", *(extra or {}),
    )


ORDER_COUNTS = View(
    name="order_counts",
    description="Order count and revenue per (store, type).",
    source_topics=(TOPIC,), value_schema=_SCHEMA, required=_REQUIRED, checks=_CHECKS,
    transform=_counts, key_columns=("store", "type"), value_columns=("count", "revenue"),
    example=_EXAMPLE, types=_TYPES,
)

ORDER_COUNTS_1M = View(
    name="order_counts_1m",
    description="Order count and revenue per (store, type) per 1-minute event-time window.",
    source_topics=(TOPIC,), value_schema=_SCHEMA, required=_REQUIRED, checks=_CHECKS,
    transform=_counts_1m, key_columns=("store", "type"), value_columns=("count", "revenue"),
    window="1 minute", watermark="1 minute", event_time="ts", example=_EXAMPLE, types=_TYPES,
)

APP = App(name="orders", topics=(TOPIC,), views=(ORDER_COUNTS, ORDER_COUNTS_1M))
