"""Seed 000: the bank. ``POST /account/{id}?amount=N`` -> ``balances`` keyed by account.

A record is a deposit (``{"account", "amount", "ts"}``) or a transfer, the same with
``to``: ONE record moves ``amount`` from ``account`` to ``to`` (issue 46's bank
workload: at every consistent cut the balances sum to the deposits, which only holds
if no cut can see one leg without the other). The view folds both legs from that one
record: ``account`` -amount, ``to`` +amount, each a transaction of its account with
the record's ``ts``. The legs come out of one ``explode`` of the parsed row, in Spark
SQL: no Python UDF (real-time mode's operator allowlist has ``GenerateExec``, no
Python), and both legs leave the source task that read the record, in its offset
order, so each leg's row carries the record's input position (``pipeline/positions.py``)
and a read of ``to`` with the transfer's token is answered once ``to``'s row is stored.
The aggregation is the one deposits always had (same keys, same aggregates): the state
of a checkpoint made before transfers still fits it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from streamiq.views.base import TICK_PREFIX, App, View
from streamiq.views.limits import AMOUNT, EVENT_TS

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["APP", "BALANCES", "BALANCE_TYPE", "MAX_ACCOUNT_CHARS", "TOPIC", "TRANSFER_CHECKS",
           "legs"]

TOPIC = "bank-transactions"
#: the longest account a transfer names in ``to`` (ingest's ids are 1-64 characters)
MAX_ACCOUNT_CHARS = 64
#: a transfer's target, checked where the pipeline dead-letters (``View.checks``): a
#: deposit has none; an empty or over-long one, or the sender itself, is refused with
#: its reason rather than folded (a self-transfer would count two transactions for one)
TRANSFER_CHECKS = (
    ("`to` IS NULL OR length(`to`) > 0", "empty transfer target (to)"),
    (f"`to` IS NULL OR length(`to`) <= {MAX_ACCOUNT_CHARS}",
     f"transfer target (to) longer than {MAX_ACCOUNT_CHARS} characters"),
    ("`to` IS NULL OR `to` <> account", "transfer to the same account"),
    # its leg would be a row of a tick's key (pipeline/ticks.py)
    (f"`to` IS NULL OR NOT startswith(`to`, '{TICK_PREFIX}')",
     f"transfer target (to) starts with the reserved {TICK_PREFIX!r}"),
)


#: The balance's type: a BIGINT sum of in-range amounts can still overflow after 9.2
#: million maximal transactions on one account, failing the batch under ANSI arithmetic
#: (then every replay of it). DECIMAL(38,0) is exact like BIGINT and needs 10**26 of
#: them; a balance beyond BIGINT is still a JSON integer in the changelog.
BALANCE_TYPE = "decimal(38,0)"


def legs(df: DataFrame) -> DataFrame:
    """Each record as the rows it folds into: a deposit as itself, a transfer as two
    (``account`` with -amount, ``to`` with +amount), the other columns (``ts``, the input
    position and time) copied to both; without ``to``. One ``explode``, no Python. A
    frame without ``to`` (a caller's own, of deposits only) is folded as it is."""
    from pyspark.sql import functions as F

    if "to" not in df.columns:
        return df
    own = F.struct(F.col("account"), F.col("amount"))
    debit = F.struct(F.col("account"), (-F.col("amount")).alias("amount"))
    credit = F.struct(F.col("`to`").alias("account"), F.col("amount"))
    rows = F.when(F.col("`to`").isNull(), F.array(own)).otherwise(F.array(debit, credit))
    rest = [c for c in df.columns if c not in ("account", "amount", "to")]
    return (df.select(F.explode(rows).alias("_leg"), *rest)
            .select("_leg.account", "_leg.amount", *rest))


def _balances(df: DataFrame, extra: Mapping[str, Column] | None = None) -> DataFrame:
    from pyspark.sql import functions as F

    return legs(df).groupBy("account").agg(
        F.sum(F.col("amount").cast(BALANCE_TYPE)).alias("balance"),
        F.count(F.lit(1)).alias("count"),
        F.max("ts").alias("last_update"),
        *[c.alias(n) for n, c in (extra or {}).items()],
    )


BALANCES = View(
    name="balances",
    description="Balance (sum of amounts; a transfer counts on both accounts), transaction "
                "count and last update per account.",
    source_topics=(TOPIC,),
    value_schema="account STRING, amount BIGINT, ts BIGINT, `to` STRING",
    required=("account", "amount", "ts"),
    checks=(("length(account) > 0", "empty account"), AMOUNT.check("amount"),
            EVENT_TS.check("ts"), *TRANSFER_CHECKS),
    transform=_balances,
    key_columns=("account",),
    value_columns=("balance", "count", "last_update"),
    example={"account": "warmup", "amount": 0, "ts": 0},
    types={"account": "string", "balance": BALANCE_TYPE, "count": "bigint",
           "last_update": "bigint"},
)

APP = App(name="bank", topics=(TOPIC,), views=(BALANCES,))
