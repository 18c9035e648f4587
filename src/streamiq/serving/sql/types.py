"""Types across the three worlds: Spark's type strings (the views), DuckDB's (the SQL
step, the catalog's empty tables) and PostgreSQL's oids on the wire; values from JSON
rows to Python (``codecs`` puts them on the wire) and parameters back into SQL literals.

A column's type is its DuckDB name everywhere in the front end: a view's Spark type is
translated once (``duck_of_spark``), an answer's DuckDB types are what the client is
told, so a row answered without DuckDB (a lookup) and one answered by it look alike.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa

__all__ = ["TEXT_OID", "array_oid", "arrow_of", "coerce", "duck_of_spark", "encode_text",
           "oid_of", "sql_literal"]

TEXT_OID = 25
_SPARK = {"string": "VARCHAR", "bigint": "BIGINT", "long": "BIGINT", "int": "INTEGER",
          "integer": "INTEGER", "smallint": "SMALLINT", "tinyint": "TINYINT",
          "double": "DOUBLE", "float": "FLOAT", "boolean": "BOOLEAN",
          "timestamp": "TIMESTAMP", "date": "DATE", "binary": "BLOB"}
_OIDS = {"BOOLEAN": 16, "TINYINT": 21, "SMALLINT": 21, "INTEGER": 23, "BIGINT": 20,
         "UTINYINT": 21, "USMALLINT": 23, "UINTEGER": 20, "UBIGINT": 1700, "HUGEINT": 1700,
         "FLOAT": 700, "DOUBLE": 701, "VARCHAR": 25, "DATE": 1082, "TIMESTAMP": 1114,
         "TIMESTAMP_S": 1114, "TIMESTAMP_MS": 1114, "TIMESTAMP_NS": 1114,
         "TIMESTAMP WITH TIME ZONE": 1184, "BLOB": 17, "TIME": 1083, "INTERVAL": 1186,
         "UUID": 2950, "JSON": 114, "OID": 26}
#: element oid -> its array type's oid (PostgreSQL's pg_type)
_ARRAYS = {16: 1000, 17: 1001, 20: 1016, 21: 1005, 23: 1007, 25: 1009, 26: 1028, 114: 199,
           700: 1021, 701: 1022, 1043: 1015, 1082: 1182, 1083: 1183, 1114: 1115, 1184: 1185,
           1186: 1187, 1700: 1231, 2950: 2951}
_ARROW = {"BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "SMALLINT": pa.int16(),
          "INTEGER": pa.int32(), "BIGINT": pa.int64(), "HUGEINT": pa.decimal128(38, 0),
          "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
          "DATE": pa.date32(), "TIMESTAMP": pa.timestamp("ms"), "BLOB": pa.binary()}
_EPOCH = datetime.datetime(1970, 1, 1)


def duck_of_spark(spark: str) -> str:
    t = spark.strip().lower()
    if t.startswith("decimal"):
        return t.upper().replace(" ", "")
    return _SPARK.get(t, "VARCHAR")


def oid_of(duck: str) -> int:
    """The PostgreSQL type oid of a DuckDB type (text for those PostgreSQL lacks)."""
    if duck.endswith("[]"):
        inner = oid_of(duck[:-2])  # an array of a type without an array type: text
        return _ARRAYS.get(inner, TEXT_OID) if inner != TEXT_OID or duck[:-2] == "VARCHAR" \
            else TEXT_OID
    return 1700 if duck.startswith("DECIMAL") else _OIDS.get(duck, TEXT_OID)


def array_oid(oid: int) -> int:
    """The oid of an array of ``oid`` (text[] for a type without one)."""
    return _ARRAYS.get(oid, 1009)


def arrow_of(duck: str) -> Any:
    if duck.startswith("DECIMAL"):
        p, _, s = duck[duck.index("(") + 1:-1].partition(",")
        return pa.decimal128(int(p), int(s or 0))
    return _ARROW.get(duck, pa.string())


def _ms(v: Any) -> Any:
    return _EPOCH + datetime.timedelta(milliseconds=v) if isinstance(v, int | float) else v


def _date(v: Any) -> Any:
    if isinstance(v, int):
        return datetime.date(1970, 1, 1) + datetime.timedelta(days=v)
    return datetime.date.fromisoformat(v) if isinstance(v, str) else v


_COERCE: dict[str, Callable[[Any], Any]] = {
    "TIMESTAMP": _ms, "DATE": _date, "VARCHAR": lambda v: v if isinstance(v, str) else str(v),
    "DOUBLE": float, "FLOAT": float, "BIGINT": int, "INTEGER": int, "SMALLINT": int,
    "TINYINT": int, "HUGEINT": lambda v: decimal.Decimal(int(v)), "BOOLEAN": bool}


def coerce(duck: str) -> Callable[[Any], Any]:
    """A JSON row's value (epoch ms, numbers as JSON has them) -> the Python value of
    that DuckDB type (what DuckDB itself would hand back)."""
    if duck.startswith("DECIMAL"):
        return lambda v: decimal.Decimal(str(v))
    return _COERCE.get(duck, lambda v: v)


def _float_text(v: float) -> bytes:
    if math.isnan(v):
        return b"NaN"
    if math.isinf(v):
        return b"Infinity" if v > 0 else b"-Infinity"
    return repr(v).encode()


def encode_text(v: Any) -> bytes:
    """Any value in PostgreSQL's text format."""
    if isinstance(v, bool):
        return b"t" if v else b"f"
    if isinstance(v, float):
        return _float_text(v)
    if isinstance(v, datetime.datetime):
        return v.isoformat(sep=" ").encode()
    if isinstance(v, bytes):
        return b"\\x" + v.hex().encode()
    if isinstance(v, list | tuple):
        return ("{" + ",".join("NULL" if x is None else encode_text(x).decode() for x in v)
                + "}").encode()
    return str(v).encode()


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_TYPED: tuple[tuple[type, str], ...] = (  # datetime before date: it is one
    (datetime.datetime, "TIMESTAMP"), (datetime.date, "DATE"), (datetime.time, "TIME"),
    (uuid.UUID, "UUID"))


def sql_literal(v: Any) -> str:
    """A parameter's value as a DuckDB SQL literal (for the planned statement's markers):
    numbers, bool, text, dates and times, intervals, bytes, and lists (``= ANY($1)``)."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float | decimal.Decimal):
        text = str(v)
        return text if math.isfinite(v) else f"CAST('{text}' AS DOUBLE)"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(map(sql_literal, v)) + "]"
    if isinstance(v, bytes | bytearray | memoryview):
        return f"from_hex('{bytes(v).hex()}')"
    if isinstance(v, datetime.timedelta):
        return f"INTERVAL '{(v // datetime.timedelta(microseconds=1))} microseconds'"
    for kind, name in _TYPED:
        if isinstance(v, kind):
            zoned = isinstance(v, datetime.datetime) and v.tzinfo is not None
            text = v.isoformat(sep=" ") if isinstance(v, datetime.datetime) else str(v)
            return f"{name}{'TZ' if zoned else ''} {_quoted(text)}"
    if isinstance(v, dict):
        return _quoted(json.dumps(v))
    return _quoted(str(v))
