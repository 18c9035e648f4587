"""Values across the front end: JSON rows -> DuckDB's Python values -> wire bytes, and
parameters and statements as clients send them."""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import Any

import pytest

from streamiq.errors import BadRequest
from streamiq.serving.sql.protocol import split_statements
from streamiq.serving.sql.types import (
    binary_encoder,
    coerce,
    decode_param,
    duck_of_spark,
    encode_text,
    oid_of,
    sql_literal,
)


@pytest.mark.parametrize(("spark", "duck", "oid"), [
    ("string", "VARCHAR", 25), ("bigint", "BIGINT", 20), ("int", "INTEGER", 23),
    ("double", "DOUBLE", 701), ("boolean", "BOOLEAN", 16), ("decimal(38,0)", "DECIMAL(38,0)", 1700),
    ("timestamp", "TIMESTAMP", 1114), ("date", "DATE", 1082), ("map<string,int>", "VARCHAR", 25)])
def test_spark_types_become_duckdb_and_postgresql_types(spark: str, duck: str, oid: int) -> None:
    assert (duck_of_spark(spark), oid_of(duck)) == (duck, oid)


@pytest.mark.parametrize(("duck", "json", "value", "text"), [
    ("TIMESTAMP", 1_700_000_000_123, datetime.datetime(2023, 11, 14, 22, 13, 20, 123000),
     b"2023-11-14 22:13:20.123000"),
    ("DECIMAL(38,0)", 12, decimal.Decimal(12), b"12"),
    ("DOUBLE", 3, 3.0, b"3.0"), ("BOOLEAN", True, True, b"t"), ("VARCHAR", 5, "5", b"5"),
    ("DOUBLE", float("nan"), None, b"NaN")])
def test_json_values_are_typed_then_encoded(duck: str, json: Any, value: Any,
                                            text: bytes) -> None:
    got = coerce(duck)(json)
    if value is not None:
        assert got == value
    assert encode_text(got) == text


def test_binary_encoders() -> None:
    assert binary_encoder(20)(-2) == struct.pack("!q", -2)
    assert binary_encoder(16)(False) == b"\x00"
    assert binary_encoder(1114)(datetime.datetime(2000, 1, 2)) == struct.pack("!q", 86_400_000_000)
    assert binary_encoder(1082)(datetime.date(1999, 12, 31)) == struct.pack("!i", -1)
    with pytest.raises(BadRequest, match="ask for text"):
        binary_encoder(1700)


def test_parameters_decode_by_oid_and_format() -> None:
    assert decode_param(b"42", False, 20) == 42
    assert decode_param(struct.pack("!i", 7), True, 23) == 7
    assert decode_param(b"x", False, 0) == "x"
    assert decode_param(None, False, 20) is None
    with pytest.raises(BadRequest, match="oid 20: invalid value"):
        decode_param(b"seven", False, 20)


def test_sql_literals_are_quoted() -> None:
    assert [sql_literal(v) for v in (None, True, 3, 1.5, "it's")] == [
        "NULL", "TRUE", "3", "1.5", "'it''s'"]


def test_a_simple_query_splits_at_semicolons_outside_quotes_and_comments() -> None:
    assert split_statements("SET a = 'x;y'; SELECT \"b;\" -- c;\n FROM t;; ") == [
        "SET a = 'x;y'", "SELECT \"b;\" -- c;\n FROM t"]
    assert split_statements(" ; ") == []
