"""Values across the front end: JSON rows -> DuckDB's Python values -> wire bytes, and
parameters and statements as clients send them."""

from __future__ import annotations

import datetime
import decimal
import struct
from typing import Any

import duckdb
import pytest

from streamiq.errors import BadRequest
from streamiq.serving.sql.codecs import RowEncoder, decode_params
from streamiq.serving.sql.split import split_statements
from streamiq.serving.sql.types import (
    coerce,
    duck_of_spark,
    encode_text,
    oid_of,
    sql_literal,
)


@pytest.mark.parametrize(("spark", "duck", "oid"), [
    ("string", "VARCHAR", 25), ("bigint", "BIGINT", 20), ("int", "INTEGER", 23),
    ("double", "DOUBLE", 701), ("boolean", "BOOLEAN", 16), ("decimal(38,0)", "DECIMAL(38,0)", 1700),
    ("timestamp", "TIMESTAMP", 1114), ("date", "DATE", 1082), ("map<string,int>", "VARCHAR", 25),
    ("array<string>", "VARCHAR", 25), ("decimal(10,2)", "DECIMAL(10,2)", 1700)])
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


#: a row of every type the views use, as DuckDB hands it back, and PostgreSQL's binary
TYPES = ("VARCHAR", "DECIMAL(38,0)", "DECIMAL(10,2)", "BIGINT", "INTEGER", "SMALLINT",
         "DOUBLE", "FLOAT", "BOOLEAN", "TIMESTAMP", "DATE", "TIMESTAMP WITH TIME ZONE",
         "HUGEINT", "VARCHAR[]")
ROW = ("acc", decimal.Decimal(-12), decimal.Decimal("3.25"), -2, 7, 1, 0.5, 0.25, False,
       datetime.datetime(2000, 1, 2), datetime.date(1999, 12, 31),
       datetime.datetime(2000, 1, 1, 1, tzinfo=datetime.UTC), 10**20, ["a", None])
BINARY = [
    b"acc",
    struct.pack("!hhHHh", 1, 0, 0x4000, 0, 12),  # numeric: 1 digit (base 10000), negative
    struct.pack("!hhHHhh", 2, 0, 0, 2, 3, 2500),  # 3.25: digits 3 and 2500, scale 2
    struct.pack("!q", -2), struct.pack("!i", 7), struct.pack("!h", 1),
    struct.pack("!d", 0.5), struct.pack("!f", 0.25), b"\x00",
    struct.pack("!q", 86_400_000_000), struct.pack("!i", -1), struct.pack("!q", 3_600_000_000),
    struct.pack("!hhHHh", 1, 5, 0, 0, 1),  # 10^20 = 1 * 10000^5 (trailing zeros dropped)
    struct.pack("!iiIii", 1, 1, 25, 2, 1) + struct.pack("!i", 1) + b"a" + struct.pack("!i", -1)]


def test_every_type_the_views_use_encodes_in_binary_as_postgresql_does() -> None:
    got = RowEncoder(TYPES, [1]).encode(ROW)
    for i, (duck, want) in enumerate(zip(TYPES, BINARY, strict=True)):
        assert got[i] == want, (duck, got[i], want)


def test_duckdb_types_postgresql_lacks_are_text_even_in_lists() -> None:
    assert [oid_of(t) for t in ("INTEGER[]", "INTEGER[][]", "STRUCT(a INTEGER)[]",
                                "MAP(VARCHAR, INTEGER)", "VARCHAR[]")] == [1007, 25, 25, 25, 1009]
    enc = RowEncoder(("INTEGER[][]", "MAP(VARCHAR, INTEGER)"), [1])
    assert enc.encode(([[1, 2], [3]], {"a": 1})) == [b"{{1,2},{3}}", b"{'a': 1}"]


def test_text_and_binary_mix_per_column_and_nulls_stay_null() -> None:
    enc = RowEncoder(("VARCHAR", "DECIMAL(38,0)", "BLOB", "BIGINT"), [0, 1, 0, 0])
    assert enc.encode(("x", decimal.Decimal(5), b"\x01\xff", None)) == [
        b"x", struct.pack("!hhHHh", 1, 0, 0, 0, 5), b"\\x01ff", None]
    text = RowEncoder(TYPES, []).encode(ROW)
    assert text[:9] == [b"acc", b"-12", b"3.25", b"-2", b"7", b"1", b"0.5", b"0.25", b"f"]
    assert text[9:] == [b"2000-01-02 00:00:00", b"1999-12-31", b"2000-01-01 01:00:00+00:00",
                        b"100000000000000000000", b'{a,NULL}']


def test_duckdb_values_of_every_view_type_round_trip_through_both_formats() -> None:
    """What DuckDB returns for each type, encoded, then decoded as a client's parameter
    of that type: the same value."""
    row = duckdb.connect().execute(
        "SELECT 'x'::VARCHAR, 12.5::DECIMAL(10,2), 7::BIGINT, 1.5::DOUBLE, true, "
        "TIMESTAMP '2024-02-03 04:05:06.5', DATE '2024-02-03'").fetchone()
    assert row is not None
    types = ("VARCHAR", "DECIMAL(10,2)", "BIGINT", "DOUBLE", "BOOLEAN", "TIMESTAMP", "DATE")
    oids = [oid_of(t) for t in types]
    for fmt in (0, 1):
        wire = RowEncoder(types, [fmt]).encode(row)
        assert tuple(decode_params(wire, [fmt], oids)) == row


def test_parameters_decode_by_oid_and_format() -> None:
    assert decode_params([b"42"], [], [20]) == [42]
    assert decode_params([struct.pack("!i", 7)], [1], [23]) == [7]
    assert decode_params([b"x", None], [0], [0, 20]) == ["x", None]
    assert decode_params([struct.pack("!hhHHh", 1, 0, 0, 0, 250)], [1], [1700]) == [
        decimal.Decimal(250)]  # pgjdbc's setBigDecimal
    assert decode_params([b'{a,"b c"}'], [0], [1009]) == [["a", "b c"]]  # = ANY(%s)
    assert decode_params([b"2024-01-02"], [0], [1082]) == [datetime.date(2024, 1, 2)]
    with pytest.raises(BadRequest, match=r"oid 20\).*invalid value"):
        decode_params([b"seven"], [0], [20])
    with pytest.raises(BadRequest, match="binary but its type is not given"):
        decode_params([b"\x00"], [1], [0])


def test_sql_literals_are_quoted() -> None:
    assert [sql_literal(v) for v in (None, True, 3, 1.5, "it's")] == [
        "NULL", "TRUE", "3", "1.5", "'it''s'"]


def test_sql_literals_of_every_parameter_type_are_what_duckdb_reads_back() -> None:
    values = [decimal.Decimal("-1.25"), datetime.datetime(2024, 1, 2, 3, 4, 5, 6),
              datetime.date(2024, 1, 2), ["a", "it's", None], [1, 2], b"\x00\xff",
              datetime.timedelta(days=1, microseconds=5), float("inf"),
              datetime.datetime(2024, 1, 2, tzinfo=datetime.UTC)]
    got = duckdb.connect().execute("SELECT " + ", ".join(map(sql_literal, values))).fetchone()
    assert got is not None and list(got) == values


def test_a_simple_query_splits_at_semicolons_outside_quotes_and_comments() -> None:
    assert split_statements("SET a = 'x;y'; SELECT \"b;\" -- c;\n FROM t;; ") == [
        "SET a = 'x;y'", "SELECT \"b;\" -- c;\n FROM t"]
    assert split_statements(" ; ") == []


@pytest.mark.parametrize(("text", "statements"), [
    ("SELECT 1 /* a; b */; SELECT 2", ["SELECT 1 /* a; b */", "SELECT 2"]),
    ("SELECT /* outer /* inner; */ still; */ 1; SELECT 2", [
        "SELECT /* outer /* inner; */ still; */ 1", "SELECT 2"]),
    ("SELECT $$a;b$$; SELECT $tag$ x; $$ ; $tag$", [
        "SELECT $$a;b$$", "SELECT $tag$ x; $$ ; $tag$"]),
    ("SELECT E'it\\'s; here'; SELECT 'a''b;'", ["SELECT E'it\\'s; here'", "SELECT 'a''b;'"]),
    ("SELECT $1; SELECT a$b; SELECT 2", ["SELECT $1", "SELECT a$b", "SELECT 2"])])
def test_semicolons_in_comments_dollar_quotes_and_escapes_do_not_split(
        text: str, statements: list[str]) -> None:
    assert split_statements(text) == statements
