"""Seed 000: the bank. ``POST /account/{id}?amount=N`` -> ``balances`` keyed by account."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamiq.views.base import App, View

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["APP", "BALANCES", "TOPIC"]

TOPIC = "bank-transactions"


def _balances(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    return df.groupBy("account").agg(
        F.sum("amount").alias("balance"),
        F.count(F.lit(1)).alias("count"),
        F.max("ts").alias("last_update"),
    )


BALANCES = View(
    name="balances",
    description="Balance (sum of amounts), transaction count and last update per account.",
    source_topics=(TOPIC,),
    value_schema="account STRING, amount BIGINT, ts BIGINT",
    required=("account", "amount", "ts"),
    checks=(("length(account) > 0", "empty account"),),
    transform=_balances,
    key_columns=("account",),
    value_columns=("balance", "count", "last_update"),
    example={"account": "warmup", "amount": 0, "ts": 0},
)

APP = App(name="bank", topics=(TOPIC,), views=(BALANCES,))
