"""Seed 000: the bank. ``POST /account/{id}?amount=N`` -> ``balances`` keyed by account."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from streamiq.views.base import App, View
from streamiq.views.limits import AMOUNT, EVENT_TS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["APP", "BALANCES", "BALANCE_TYPE", "TOPIC"]

TOPIC = "bank-transactions"


#: The balance's type: a BIGINT sum of in-range amounts can still overflow after 9.2
#: million maximal transactions on one account, failing the batch under ANSI arithmetic
#: (then every replay of it). DECIMAL(38,0) is exact like BIGINT and needs 10**26 of
#: them; a balance beyond BIGINT is still a JSON integer in the changelog.
BALANCE_TYPE = "decimal(38,0)"


def _balances(df: DataFrame, extra: Mapping[str, Column] | None = None) -> DataFrame:
    from pyspark.sql import functions as F

    return df.groupBy("account").agg(
        F.sum(F.col("amount").cast(BALANCE_TYPE)).alias("balance"),
        F.count(F.lit(1)).alias("count"),
        F.max("ts").alias("last_update"),
        *[c.alias(n) for n, c in (extra or {}).items()],
    )


BALANCES = View(
    name="balances",
    description="Balance (sum of amounts), transaction count and last update per account.",
    source_topics=(TOPIC,),
    value_schema="account STRING, amount BIGINT, ts BIGINT",
    required=("account", "amount", "ts"),
    checks=(("length(account) > 0", "empty account"), AMOUNT.check("amount"),
            EVENT_TS.check("ts")),
    transform=_balances,
    key_columns=("account",),
    value_columns=("balance", "count", "last_update"),
    example={"account": "warmup", "amount": 0, "ts": 0},
    types={"account": "string", "balance": BALANCE_TYPE, "count": "bigint",
           "last_update": "bigint"},
)

APP = App(name="bank", topics=(TOPIC,), views=(BALANCES,))
