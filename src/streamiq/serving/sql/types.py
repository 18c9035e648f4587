"""Types across the three worlds: Spark's type strings (the views), DuckDB's (the SQL
step, the catalog's empty tables) and PostgreSQL's oids on the wire; values from JSON
rows to Python to wire bytes (text for every type, binary for the common ones).

A column's type is its DuckDB name everywhere in the front end: a view's Spark type is
translated once (``duck_of_spark``), an answer's DuckDB types are what the client is
told, so a row answered without DuckDB (a lookup) and one answered by it look alike.
"""

from __future__ import annotations

import datetime
import decimal
import math
import struct
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from streamiq.errors import BadRequest

__all__ = ["TEXT_OID", "arrow_of", "binary_encoder", "coerce", "decode_param", "duck_of_spark",
           "encode_text", "oid_of", "sql_literal"]

TEXT_OID = 25
_SPARK = {"string": "VARCHAR", "bigint": "BIGINT", "long": "BIGINT", "int": "INTEGER",
          "integer": "INTEGER", "smallint": "SMALLINT", "tinyint": "TINYINT",
          "double": "DOUBLE", "float": "FLOAT", "boolean": "BOOLEAN",
          "timestamp": "TIMESTAMP", "date": "DATE", "binary": "BLOB"}
_OIDS = {"BOOLEAN": 16, "TINYINT": 21, "SMALLINT": 21, "INTEGER": 23, "BIGINT": 20,
         "UTINYINT": 21, "USMALLINT": 23, "UINTEGER": 20, "UBIGINT": 1700, "HUGEINT": 1700,
         "FLOAT": 700, "DOUBLE": 701, "VARCHAR": 25, "DATE": 1082, "TIMESTAMP": 1114,
         "TIMESTAMP WITH TIME ZONE": 1184, "BLOB": 17}
_ARROW = {"BOOLEAN": pa.bool_(), "TINYINT": pa.int8(), "SMALLINT": pa.int16(),
          "INTEGER": pa.int32(), "BIGINT": pa.int64(), "HUGEINT": pa.decimal128(38, 0),
          "FLOAT": pa.float32(), "DOUBLE": pa.float64(), "VARCHAR": pa.string(),
          "DATE": pa.date32(), "TIMESTAMP": pa.timestamp("ms"), "BLOB": pa.binary()}
_EPOCH = datetime.datetime(1970, 1, 1)
_PG_EPOCH = datetime.datetime(2000, 1, 1)
_I2, _I4, _I8 = struct.Struct("!h"), struct.Struct("!i"), struct.Struct("!q")
_F4, _F8 = struct.Struct("!f"), struct.Struct("!d")


def duck_of_spark(spark: str) -> str:
    t = spark.strip().lower()
    if t.startswith("decimal"):
        return t.upper().replace(" ", "")
    return _SPARK.get(t, "VARCHAR")


def oid_of(duck: str) -> int:
    return 1700 if duck.startswith("DECIMAL") else _OIDS.get(duck, TEXT_OID)


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


def _ts_binary(v: datetime.datetime) -> bytes:
    delta = v.replace(tzinfo=None) - _PG_EPOCH
    return _I8.pack((delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds)


_BINARY: dict[int, Callable[[Any], bytes]] = {
    16: lambda v: b"\x01" if v else b"\x00", 21: _I2.pack, 23: _I4.pack, 20: _I8.pack,
    700: _F4.pack, 701: _F8.pack, 25: lambda v: str(v).encode(), 17: bytes,
    1114: _ts_binary, 1082: lambda v: _I4.pack((v - _PG_EPOCH.date()).days)}


def binary_encoder(oid: int) -> Callable[[Any], bytes]:
    enc = _BINARY.get(oid)
    if enc is None:
        raise BadRequest(f"binary results are not supported for type oid {oid}; "
                         "ask for text")
    return enc


_TEXT_PARAM: dict[int, Callable[[str], Any]] = {
    20: int, 21: int, 23: int, 700: float, 701: float, 1700: decimal.Decimal,
    16: lambda t: t.lower() in ("t", "true", "1", "on", "y", "yes")}
_BINARY_PARAM: dict[int, Callable[[bytes], Any]] = {
    20: lambda b: _I8.unpack(b)[0], 23: lambda b: _I4.unpack(b)[0],
    21: lambda b: _I2.unpack(b)[0], 701: lambda b: _F8.unpack(b)[0],
    700: lambda b: _F4.unpack(b)[0], 16: lambda b: b != b"\x00"}


def decode_param(raw: bytes | None, binary: bool, oid: int) -> Any:
    """A Bind parameter's value; oid 0 (unspecified) and text types stay strings."""
    if raw is None:
        return None
    try:
        if binary:
            return _BINARY_PARAM.get(oid, bytes.decode)(raw)
        text = raw.decode()
        return _TEXT_PARAM.get(oid, str)(text)
    except (ValueError, struct.error, decimal.InvalidOperation) as exc:
        raise BadRequest(f"parameter of type oid {oid}: invalid value {raw!r}: {exc}") from None


def sql_literal(v: Any) -> str:
    """A parameter's value as a SQL literal (for the planned statement's markers)."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, int | float | decimal.Decimal):
        return repr(v) if isinstance(v, float) else str(v)
    return "'" + str(v).replace("'", "''") + "'"
