"""The dead-letter records Spark computes: any bytes representable, always under the limit
(``pipeline/deadletter_record.py``'s SQL, run on the tests' Spark session)."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest

from streamiq.pipeline.deadletter_record import (
    KEY_MAX,
    RECORD_OVERHEAD,
    letter_columns,
    reason_class,
)
from streamiq.pipeline.deadletter_writer import RateLimitedLog

LIMIT = 1_048_588  # Kafka's default max.message.bytes


class Letter:
    def __init__(self, key: bytes | None, value: str) -> None:
        self.key = key
        self.value = value.encode()
        self.truncated = json.loads(value)["truncated"]


@pytest.fixture(scope="module")
def letters(spark: Any) -> Any:
    """letters(key, value, limit) -> the dead letter Spark computes for that record."""
    from pyspark.sql import functions as F

    def make(key: bytes | None, value: bytes | None, limit: int = LIMIT) -> Letter:
        df = spark.createDataFrame([(key, value)], "k BINARY, v BINARY")
        k, v = letter_columns(F.lit("invalid JSON (not a JSON object)"), "balances",
                              F.lit("bank-transactions"), F.lit(2), F.lit(12345).cast("long"),
                              F.lit(1_700_000_000_000).cast("long"), F.col("k"), F.col("v"),
                              limit)
        row = df.select(k.alias("key"), v.alias("value")).collect()[0]
        return Letter(None if row.key is None else bytes(row.key), row.value)

    return make


def _letter(letters: Any, key: bytes | None, value: bytes | None,
            limit: int = LIMIT) -> tuple[Any, dict[str, Any]]:
    letter = letters(key, value, limit)
    size = len(letter.value) + (len(letter.key) if letter.key else 0)
    assert size <= limit - RECORD_OVERHEAD, size
    return letter, json.loads(letter.value)


def _raw(doc: dict[str, Any], field: str) -> bytes | None:
    if doc[field] is None:
        return None
    enc = doc[f"{field}_encoding"]
    return base64.b64decode(doc[field]) if enc == "base64" else doc[field].encode()


def test_small_record_is_kept_whole_with_its_origin(letters: Any) -> None:
    letter, doc = _letter(letters, b"acct-1", b'{"amount": "x"}')
    assert doc == {"reason": "invalid JSON (not a JSON object)", "view": "balances",
                   "topic": "bank-transactions", "partition": 2, "offset": 12345,
                   "timestamp": 1_700_000_000_000, "key": "acct-1", "key_encoding": "utf-8",
                   "key_bytes": 6, "value": '{"amount": "x"}', "value_encoding": "utf-8",
                   "value_bytes": 15, "truncated": False}
    assert letter.key == b"acct-1" and not letter.truncated


@pytest.mark.parametrize("key, value", [
    (b"\xff\xfe\x00k", b"\xc3\x28 not utf-8 \x80"),  # invalid UTF-8 both
    (None, None), (b"", b""),
    (bytes(range(256)), "é ünïcode ✓ \u0000\n\"".encode()),
])
def test_any_bytes_are_representable_exactly(letters: Any, key: bytes | None,
                                             value: bytes | None) -> None:
    letter, doc = _letter(letters, key, value)
    assert (_raw(doc, "key"), _raw(doc, "value")) == (key, value)
    for f in ("key", "value"):  # base64 in one line (Spark's chunks it unless told not to)
        assert doc[f"{f}_encoding"] != "base64" or "\n" not in doc[f]
    assert letter.key == key and doc["truncated"] is False


@pytest.mark.parametrize("value", [
    b"x" * 3_000_000,  # larger than the limit
    b"\x00" * 900_000,  # escapes grow 6x in JSON
    b"\xff" * 1_040_000,  # base64 grows 4/3
    ("é" * 700_000).encode(),  # a cut must not split a character
    b'"' * 1_000_000,
])
def test_oversized_records_are_truncated_under_the_limit(letters: Any, value: bytes) -> None:
    key = b"k" * 5000
    letter, doc = _letter(letters, key, value)
    assert doc["truncated"] is True and letter.truncated
    assert (doc["offset"], doc["partition"], doc["topic"]) == (12345, 2, "bank-transactions")
    assert (doc["key_bytes"], doc["value_bytes"]) == (5000, len(value))
    assert letter.key == key[:KEY_MAX] and _raw(doc, "key") == key[:KEY_MAX]
    kept = _raw(doc, "value")
    assert kept is not None and value.startswith(kept) and len(kept) > 100_000
    if value[:2] == "é".encode():
        assert doc["value_encoding"] == "utf-8"


@pytest.mark.parametrize("limit", [2000, 10_000, 100_000])
def test_small_topic_limits_are_respected(letters: Any, limit: int) -> None:
    _, doc = _letter(letters, b"\xff" * 3000, b"\xfe" * 300_000, limit)
    assert doc["truncated"] and doc["offset"] == 12345


def test_a_limit_below_the_metadata_keeps_the_metadata_alone(letters: Any) -> None:
    letter, doc = _letter(letters, b"k" * 2000, b"v" * 2000, limit=RECORD_OVERHEAD + 400)
    assert letter.key is None and doc["key"] is None and doc["value"] is None
    assert doc["truncated"] and (doc["key_bytes"], doc["value_bytes"]) == (2000, 2000)
    assert doc["offset"] == 12345 and doc["topic"] == "bank-transactions"


def test_reason_class_is_a_bounded_label() -> None:
    assert reason_class("wrong type for field(s): amount, ts") == "wrong type for field(s)"
    assert reason_class("null value") == "null value"
    assert reason_class("check failed: empty account") == "check failed: empty account"


def test_rate_limited_log_holds_back_a_flood(caplog: pytest.LogCaptureFixture) -> None:
    limited = RateLimitedLog(logging.getLogger("t-dl"), interval=3600)
    with caplog.at_level(logging.WARNING, "t-dl"):
        logged = [limited.warn("dead letter %d", i) for i in range(1000)]
    assert logged.count(True) == 1 and len(caplog.records) == 1
    assert limited.held == 999
    limited._last = float("-inf")  # the interval has passed
    with caplog.at_level(logging.WARNING, "t-dl"):
        assert limited.warn("dead letter %d", 1000)
    assert "and 999 more" in caplog.records[-1].getMessage()
