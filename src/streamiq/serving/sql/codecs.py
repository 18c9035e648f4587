"""Values on the wire in PostgreSQL's text and binary formats, by type oid: result rows
encoded, Bind parameters decoded.

psycopg's adapters do the work (``psycopg.adapt.Transformer``: its dumpers and loaders,
compiled in psycopg-binary): numeric, integers, floats, bool, text, date, time,
timestamps with and without time zone, interval, uuid, json and arrays of them, in both
formats, as PostgreSQL itself writes and reads them (docs/design.md, "SQL on live
views", has the comparison with hand-written codecs). Two things are ours: bytea in
text format (``\\x`` + hex, which psycopg's dumper, made for query parameters, does not
write) and any type without an oid here (DuckDB's STRUCT, MAP, nested lists), sent as
text.
"""

from __future__ import annotations

import decimal
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, cast

import psycopg
from psycopg.adapt import Transformer
from psycopg.pq import Format

from streamiq.errors import BadRequest
from streamiq.serving.sql.types import TEXT_OID, encode_text, oid_of

__all__ = ["RowEncoder", "decode_params", "format_of", "row_encoder"]

#: oids whose parameters in text format stay the client's string (text, varchar, name,
#: unknown, unspecified): the statement's SQL casts them where a type is needed
_TEXTUAL = frozenset({0, 19, 25, 705, 1042, 1043})


def format_of(formats: Sequence[int], i: int) -> int:
    """Column or parameter ``i``'s format code (none: text; one: every column's)."""
    return formats[i] if len(formats) > 1 else (formats[0] if formats else 0)


def _numeric(v: Any) -> Any:
    return v if isinstance(v, decimal.Decimal) else decimal.Decimal(v)


#: values psycopg's dumper for the oid would not take as DuckDB hands them over
_PREPARE: dict[int, Callable[[Any], Any]] = {1700: _numeric}


def _hand(oid: int, fmt: int) -> Callable[[Any], bytes] | None:
    """Our own encoder for a column psycopg does not write as PostgreSQL would."""
    if oid == TEXT_OID:
        return lambda v: v.encode() if isinstance(v, str) else encode_text(v)
    if oid == 17 and fmt == 0:
        return encode_text
    return None


class RowEncoder:
    """Encodes rows of the given column types (DuckDB names) in the given formats."""

    def __init__(self, types: Sequence[str], formats: Sequence[int]) -> None:
        self.oids = [oid_of(t) for t in types]
        fmts = [format_of(formats, i) for i in range(len(self.oids))]
        self._hand = [(i, enc) for i, (oid, f) in enumerate(zip(self.oids, fmts, strict=True))
                      if (enc := _hand(oid, f)) is not None]
        done = {i for i, _ in self._hand}
        self._groups: list[tuple[list[int], Any, list[Format]]] = []
        for f in (0, 1):
            cols = [i for i, g in enumerate(fmts) if g == f and i not in done]
            if cols:
                tx = Transformer()
                fmt = Format.BINARY if f else Format.TEXT
                tx.set_dumper_types([self.oids[i] for i in cols], fmt)
                self._groups.append((cols, tx, [fmt] * len(cols)))
        self._prepare = [(i, p) for i, oid in enumerate(self.oids)
                         if (p := _PREPARE.get(oid)) is not None and i not in done]
        self._one = (len(self._groups) == 1 and not self._hand
                     and len(self._groups[0][0]) == len(self.oids))

    def encode(self, row: Sequence[Any]) -> list[bytes | None]:
        """The row's values on the wire (bytes, or bytearrays psycopg wrote; None: NULL)."""
        if self._prepare:
            row = list(row)
            for i, prep in self._prepare:
                if row[i] is not None:
                    row[i] = prep(row[i])
        if self._one:  # every column in one format through psycopg: one C call
            _, tx, fmts = self._groups[0]
            return cast(list[bytes | None], tx.dump_sequence(row, fmts))
        out: list[bytes | None] = [None] * len(row)
        for cols, tx, fmts in self._groups:
            for i, b in zip(cols, tx.dump_sequence([row[i] for i in cols], fmts), strict=True):
                out[i] = b
        for i, enc in self._hand:
            out[i] = None if row[i] is None else enc(row[i])
        return out


_ENCODERS: OrderedDict[tuple[tuple[str, ...], tuple[int, ...]], RowEncoder] = OrderedDict()
_KEPT = 256  # encoders kept, by column types and formats (a Transformer costs ~4 us)


def row_encoder(types: Sequence[str], formats: Sequence[int]) -> RowEncoder:
    """A ``RowEncoder`` for these types and formats, made once (the event loop's thread
    only: psycopg's Transformer is not shared between threads)."""
    key = (tuple(types), tuple(formats))
    enc = _ENCODERS.get(key)
    if enc is None:
        enc = _ENCODERS[key] = RowEncoder(types, formats)
        while len(_ENCODERS) > _KEPT:
            _ENCODERS.popitem(last=False)
    else:
        _ENCODERS.move_to_end(key)
    return enc


def decode_params(raw: Sequence[bytes | None], formats: Sequence[int],
                  oids: Sequence[int]) -> list[Any]:
    """A Bind's parameter values by type oid (the client's, else the one the statement
    was described with): numbers, dates, arrays as Python values; text as str."""
    tx = Transformer()
    out: list[Any] = []
    for i, value in enumerate(raw):
        oid = oids[i] if i < len(oids) else 0
        binary = format_of(formats, i) == 1
        if value is None:
            out.append(None)
        elif not binary and oid in _TEXTUAL:
            out.append(bytes(value).decode())
        else:
            out.append(_load(tx, value, oid, binary, i))
    return out


def _load(tx: Any, value: bytes, oid: int, binary: bool, i: int) -> Any:
    if binary and oid == 0:
        raise BadRequest(f"parameter ${i + 1} is binary but its type is not given")
    try:
        got = tx.get_loader(oid, Format.BINARY if binary else Format.TEXT).load(value)
    except (psycopg.Error, ValueError, UnicodeDecodeError, OverflowError) as exc:
        raise BadRequest(f"parameter ${i + 1} (type oid {oid}): invalid value "
                         f"{bytes(value)[:40]!r}: {exc}") from None
    return bytes(got) if isinstance(got, memoryview | bytearray) else got
