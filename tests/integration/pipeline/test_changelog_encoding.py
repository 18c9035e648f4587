"""The changelog records Spark computes (pipeline/changelog.py): the contract's key text
and JSON value, the same bytes the Python writer made before Spark's Kafka sink wrote
them (its unit tests' cases, now run on the tests' Spark session)."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from streamiq.pipeline.changelog import changelog_columns

pytestmark = pytest.mark.integration

UTC = dt.UTC
SCHEMA = ("store STRING, n INT, ok BOOLEAN, day DATE, "
          "window STRUCT<start: TIMESTAMP, end: TIMESTAMP>, balance DECIMAL(38,0), "
          "price DECIMAL(10,2), avg DOUBLE, seen TIMESTAMP, raw BINARY")


def _frame(spark: Any) -> Any:
    t = dt.datetime
    rows = [
        ("s-1", 7, True, dt.date(2024, 1, 2),
         (t(1970, 1, 1, 0, 1, tzinfo=UTC), t(1970, 1, 1, 0, 2, tzinfo=UTC)), Decimal(2**70),
         Decimal("12.50"), 1.0, t(1970, 1, 1, 0, 0, 0, 1500, tzinfo=UTC), bytearray(b"\x00\xff")),
        ("s|2", -1, False, None,
         (t(1970, 1, 1, tzinfo=UTC), t(1970, 1, 1, 0, 1, tzinfo=UTC)), Decimal(-3),
         Decimal("0.01"), float("nan"), t(1969, 12, 31, 23, 59, 59, 998500, tzinfo=UTC), None),
        (None, None, None, dt.date(1969, 12, 31), None, None, None, float("inf"), None,
         bytearray(b"")),
    ]
    return spark.createDataFrame(rows, SCHEMA)


def test_keys_are_spark_text_joined_by_bar(spark: Any) -> None:
    got = [r.key for r in changelog_columns(_frame(spark), ["store", "n", "ok", "day"])
           .collect()]
    assert got == ["s-1|7|true|2024-01-02", "s|2|-1|false|", "|||1969-12-31"]
    assert [r.key for r in changelog_columns(_frame(spark), ["store"]).collect()] == [
        "s-1", "s|2", ""]


def test_values_follow_the_changelog_contract(spark: Any) -> None:
    raw = [r.value for r in changelog_columns(_frame(spark), ["store"]).collect()]
    rows = [json.loads(v) for v in raw]
    assert list(rows[0]) == ["store", "n", "ok", "day", "window_start", "window_end",
                             "balance", "price", "avg", "seen", "raw"]
    assert rows[0]["window_start"] == 60_000 and rows[0]["window_end"] == 120_000
    assert rows[0]["balance"] == 2**70 and '"balance":1180591620717411303424,' in raw[0]
    assert '"price":12.50,' in raw[0] and rows[1]["balance"] == -3
    assert rows[0]["day"] == "2024-01-02" and rows[0]["ok"] is True and rows[0]["avg"] == 1.0
    assert rows[0]["seen"] == 1 and rows[1]["seen"] == -2  # epoch ms, floored
    assert rows[0]["raw"] == "AP8=" and rows[1]["raw"] is None
    assert rows[2]["window_start"] is None and rows[2]["store"] is None  # nulls written
    assert rows[1]["avg"] is None and rows[2]["avg"] is None  # JSON has no NaN, no Infinity
