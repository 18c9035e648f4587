"""Validation expressions on hostile values, and the views' plans on what passes them.

Runs Spark (the session fixture of tests/conftest.py, shared with the other in-process
Spark tests of a worker: an integration test, not a unit one), batch frames shaped like
the source's rows. Each test fails on the code before the bounds:
out-of-range values were valid (so the plan raised Spark's ANSI overflow) and NaN or
Infinity amounts were aggregated.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from streamiq.pipeline.deadletter import parse_input, reason_column, valid_column
from streamiq.views import bank, orders
from streamiq.views.base import View
from streamiq.views.limits import MAX_AMOUNT, MAX_TS_MS

pytestmark = pytest.mark.integration

I64_MAX, I64_MIN = 2**63 - 1, -(2**63)
TS = 1_700_000_000_000
RANGE_AMOUNT = f"check failed: amount out of range [{-MAX_AMOUNT}, {MAX_AMOUNT}]"
RANGE_ORDER_AMOUNT = f"check failed: amount out of range [0, {MAX_AMOUNT}]"
RANGE_TS = f"check failed: ts out of range [0, {MAX_TS_MS}]"
NON_FINITE = "not a finite number (NaN or Infinity) in field(s): amount"


# the columns of Spark's kafka source, as DDL
KAFKA_COLUMNS = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
                 "timestamp TIMESTAMP, timestampType INT")


def _raw(spark: Any, values: list[str]) -> Any:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    rows = [(b"k", v.encode(), "t", 0, i, now, 0) for i, v in enumerate(values)]
    return spark.createDataFrame(rows, KAFKA_COLUMNS)


def _reasons(spark: Any, view: View, values: list[str]) -> dict[str, str | None]:
    """value -> reason (None: valid), and asserts valid_column agrees with the reason."""
    from pyspark.sql import functions as F

    parsed = parse_input(_raw(spark, values), view)
    rows = parsed.select(F.col("_streamiq_value").cast("string").alias("v"),
                         valid_column(view).alias("ok"),
                         reason_column(view).alias("why")).collect()
    for r in rows:
        assert r.ok == (r.why is None), r
    return {r.v: r.why for r in rows}


def _bank(amount: Any, ts: Any = TS) -> str:
    return json.dumps({"account": "a", "amount": amount, "ts": ts})


def _order(amount: Any, ts: Any = TS) -> str:
    return (f'{{"order_id": "o", "store": "s", "type": "GENERAL", "amount": {amount}, '
            f'"ts": {ts}}}')


def test_bank_amount_and_ts_ranges(spark: Any) -> None:
    cases = {
        _bank(5): None, _bank(MAX_AMOUNT): None, _bank(-MAX_AMOUNT): None,
        _bank(0, 0): None, _bank(1, MAX_TS_MS): None,
        _bank(MAX_AMOUNT + 1): RANGE_AMOUNT, _bank(-MAX_AMOUNT - 1): RANGE_AMOUNT,
        _bank(I64_MAX): RANGE_AMOUNT, _bank(I64_MIN): RANGE_AMOUNT,  # abs() would overflow
        _bank(2**64): "wrong type for field(s): amount",  # beyond BIGINT: not a number to us
        _bank(1, I64_MAX): RANGE_TS, _bank(1, -1): RANGE_TS, _bank(1, MAX_TS_MS + 1): RANGE_TS,
    }
    assert _reasons(spark, bank.BALANCES, list(cases)) == cases


@pytest.mark.parametrize("view", [orders.ORDER_COUNTS, orders.ORDER_COUNTS_1M])
def test_orders_non_finite_and_out_of_range(spark: Any, view: View) -> None:
    cases = {
        _order(12.5): None, _order(0): None, _order(MAX_AMOUNT): None,
        _order("NaN"): NON_FINITE, _order("Infinity"): NON_FINITE,
        _order("-Infinity"): NON_FINITE, _order("1e309"): NON_FINITE,
        _order("-1e309"): NON_FINITE, _order('"NaN"'): NON_FINITE,  # Spark reads "NaN" too
        _order("1e13"): RANGE_ORDER_AMOUNT, _order(-1): RANGE_ORDER_AMOUNT,
        _order("9.3e18"): RANGE_ORDER_AMOUNT,
        _order(1, I64_MAX): RANGE_TS, _order(1, -5): RANGE_TS,
    }
    assert _reasons(spark, view, list(cases)) == cases


def _run_plan(view: View, raw: Any) -> list[Any]:
    """What build_view_stream does, on a batch frame: parse, keep valid, transform."""
    from streamiq.pipeline.queries import view_frame

    return view_frame(raw, view).collect()


@pytest.mark.parametrize("view", [bank.BALANCES, orders.ORDER_COUNTS, orders.ORDER_COUNTS_1M])
def test_hostile_records_do_not_fail_the_plan(spark: Any, view: View) -> None:
    """The attacker's records are filtered out; the good ones aggregate exactly."""
    if view is bank.BALANCES:
        values = [_bank(I64_MAX), _bank(I64_MAX), _bank(7), _bank(-2), _bank(1, I64_MAX)]
    else:
        values = [_order("NaN"), _order("1e309"), _order(3.5), _order(4), _order(1, I64_MAX)]
    rows = _run_plan(view, _raw(spark, values))
    assert len(rows) == 1
    r = rows[0].asDict()
    assert r["count"] == 2
    assert (r["balance"] == 5) if view is bank.BALANCES else (r["revenue"] == 7.5)


def test_balance_sum_cannot_overflow_bigint(spark: Any) -> None:
    """9.3 million maximal amounts on one account sum past 2**63: exact, no overflow."""
    from pyspark.sql import functions as F

    n = 9_300_000
    df = spark.range(n).select(F.lit("a").alias("account"),
                               F.lit(MAX_AMOUNT).cast("bigint").alias("amount"),
                               F.col("id").alias("ts"))
    (row,) = bank.BALANCES.transform(df).collect()
    assert row["balance"] == Decimal(n * MAX_AMOUNT) and n * MAX_AMOUNT > I64_MAX
    assert row["count"] == n and row["last_update"] == n - 1


def test_balance_changelog_value_is_a_json_integer(spark: Any) -> None:
    """The DECIMAL(38,0) balance is written as a plain JSON integer (no 5.0, no 5E+0)."""
    from streamiq.pipeline.queries import changelog_records

    rows = [("a", 5, 1), ("a", MAX_AMOUNT, 2), ("b", -3, 3)]
    df = spark.createDataFrame(rows, "account STRING, amount BIGINT, ts BIGINT")
    out = changelog_records(bank.BALANCES.transform(df), bank.BALANCES).collect()
    values = {r.key: r.value for r in out}
    assert json.loads(values["a"])["balance"] == MAX_AMOUNT + 5
    assert '"balance":-3,' in values["b"]


def test_values_that_would_fail_the_sink_are_invalid(spark: Any) -> None:
    """Invalid UTF-8 inside a JSON string used to pass (the sink then failed decoding
    the key); a value past MAX_VALUE_BYTES would make changelog rows too large."""
    from streamiq.pipeline.deadletter import MAX_VALUE_BYTES

    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    big = json.dumps({"account": "a" * MAX_VALUE_BYTES, "amount": 1, "ts": TS}).encode()
    values = [b'{"account": "a\xff", "amount": 1, "ts": 1}', big,
              b"[" * 5000 + b"]" * 5000, b"", b"null", _bank(3).encode()]
    rows = [(b"\xff\xfe", v, "t", 0, i, now, 0) for i, v in enumerate(values)]
    parsed = parse_input(spark.createDataFrame(rows, KAFKA_COLUMNS), bank.BALANCES)
    got = [(r.ok, r.why) for r in parsed.orderBy("_streamiq_offset").select(
        valid_column(bank.BALANCES).alias("ok"), reason_column(bank.BALANCES).alias("why"),
    ).collect()]
    assert got == [(False, "value is not valid UTF-8"),
                   (False, f"value too large (over {MAX_VALUE_BYTES} bytes)"),
                   *[(False, "invalid JSON (not a JSON object)")] * 3,
                   (True, None)]  # an invalid-UTF-8 key is carried as bytes, never decoded
