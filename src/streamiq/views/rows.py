"""Changelog rows checked against their view before a node stores them.

A serving node trusts no changelog record (anyone who can write the topic can write
one). :func:`check_row` turns a record into what the store holds, or raises
:class:`~streamiq.kafka.skips.Skip` naming a *reason* (a metric label, one of
:data:`REASONS`):

* the value is at most :data:`MAX_RECORD_BYTES`, exactly one JSON object (strict: no
  trailing content, NaN or invalid UTF-8, since answers paste stored rows into their
  JSON) nested at most :data:`MAX_DEPTH` deep;
* the key is UTF-8 and in the partition it was read from (Kafka's murmur2 over the key,
  as the sink writes it), so no row is held, scanned or aggregated twice;
* every key column is in the row, and the key is those columns joined by ``|`` where
  the sink's text of them can be told from the JSON value (string, date, integer and
  boolean columns, nulls; strings only when the view does not know its types);
* each column holds its type, when the view knows its columns' Spark types
  (:attr:`View.types`): integers are integers within 64 bits, floating and decimal
  numbers finite numbers, strings strings, timestamps epoch-ms integers; null is
  allowed; value columns may be missing (added to the view later) or extra;
* windowed rows carry an integer ``window_start`` (and ``window_end``, if any, after it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

import orjson

from streamiq.kafka import partitioner
from streamiq.kafka.partitioner import partition_for
from streamiq.kafka.skips import Skip
from streamiq.views.base import KEY_SEP, View, store_key

__all__ = ["MAX_DEPTH", "MAX_RECORD_BYTES", "REASONS", "RowCheck", "check_row", "depth",
           "fits"]

#: changelog records larger than this are skipped (a row is pasted whole into answers)
MAX_RECORD_BYTES = 4 << 20
#: arrays/objects nested deeper than this are skipped (Spark's nested types are shallow;
#: deep values break recursive encoders downstream)
MAX_DEPTH = 64
_I64 = 1 << 63

#: why a record was skipped (the ``reason`` label of the skip counter)
REASONS = ("too_large", "not_json", "too_deep", "no_key", "bad_key", "wrong_partition",
           "missing_column", "key_mismatch", "wrong_type", "bad_window", "bad_marker",
           "marker_beyond_end", "marker_unknown_partition", "marker_unverified",
           "undecodable")


def depth(doc: Any) -> int:
    """How deeply arrays and objects nest in ``doc`` (0 for a scalar), iteratively."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        v, d = stack.pop()
        items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if items is None:
            continue
        deepest = max(deepest, d)
        if d <= MAX_DEPTH:  # no need to walk further than the limit
            stack.extend((x, d + 1) for x in items)
    return deepest


# type(v) is ...: exact JSON types (bool is an int subclass), and quick: every row's
# every column goes through these


def _is_int(v: Any) -> TypeGuard[int]:
    return type(v) is int and -_I64 <= v < _I64


def _is_number(v: Any) -> bool:
    t = type(v)
    return t is int or (t is float and math.isfinite(v))


_SCALARS: dict[str, Callable[[Any], bool]] = {
    **dict.fromkeys(("tinyint", "smallint", "int", "integer", "bigint", "long", "short",
                     "byte", "timestamp", "timestamp_ntz"), _is_int),
    **dict.fromkeys(("float", "double", "real", "decimal"), _is_number),
    **dict.fromkeys(("string", "varchar", "char", "date", "binary"),
                    lambda v: type(v) is str),
    "boolean": lambda v: type(v) is bool,
    "array": lambda v: type(v) is list,
    "map": lambda v: type(v) is dict,
    "struct": lambda v: type(v) is dict,
}


def _base(spark_type: str) -> str:
    """``decimal(38,0)`` -> ``decimal``, ``array<string>`` -> ``array``."""
    return spark_type.strip().lower().split("(", 1)[0].split("<", 1)[0].strip()


def _checker(spark_type: str) -> Callable[[Any], bool] | None:
    """The check of a non-null JSON value of ``spark_type`` (None: anything goes)."""
    return _SCALARS.get(_base(spark_type))


def fits(spark_type: str, v: Any) -> bool:
    """Whether JSON value ``v`` is what the sink writes for ``spark_type`` (a Spark
    simple string such as ``bigint``, ``decimal(38,0)``, ``array<string>``); null fits
    any type, an unknown type takes anything."""
    check = _checker(spark_type)
    return v is None or check is None or check(v)


#: how the sink's key text (Arrow's cast to string) reads from a key column's JSON value,
#: by the column's type: strings and dates as they are, integers in decimal, booleans
#: lower-case; other types (timestamps, decimals, floats, binary) are not compared, nor
#: any but strings when the view does not know its types
_KEY_TEXT: dict[str, tuple[type, Callable[[Any], str]]] = {
    **dict.fromkeys(("string", "varchar", "char", "date", "?"), (str, str)),
    **dict.fromkeys(("tinyint", "smallint", "int", "integer", "bigint", "long", "short",
                     "byte"), (int, str)),
    "boolean": (bool, lambda v: "true" if v else "false"),
}


def _key_text(kind: tuple[type, Callable[[Any], str]] | None, v: Any) -> str | None:
    """The key text the sink writes for key value ``v`` of ``kind`` (None: not known)."""
    if v is None:
        return ""  # Arrow's null, filled with ""
    if kind is None or type(v) is not kind[0]:
        return None
    return kind[1](v)


def _window_start(row: Mapping[str, Any]) -> int:
    w, end = row.get("window_start"), row.get("window_end")
    if not _is_int(w):
        raise Skip("bad_window", f"windowed row without an integer window_start: "
                   f"{w!r}"[:200])
    if end is not None and not (_is_int(end) and end > w):
        raise Skip("bad_window", f"window_end {end!r} is not an integer after "
                   f"window_start {w}"[:200])
    return int(w)


class RowCheck:
    """:func:`check_row` for one view, its column checks resolved once (a node checks
    every changelog record it applies)."""

    def __init__(self, view: View, partitions: int | None) -> None:
        self.view = view
        self.partitions = partitions
        self.windowed = view.windowed
        self._keys = view.key_columns
        self._key_kinds = [_KEY_TEXT.get(_base(view.types[c]) if c in view.types else "?")
                           for c in view.key_columns]
        # integer columns checked inline (every row's every column: a call each cost
        # a restore a tenth of its time), the others through their check
        self._ints = tuple(c for c, t in view.types.items() if _checker(t) is _is_int)
        self._types = [(c, t, f) for c, t in view.types.items()
                       if (f := _checker(t)) is not None and f is not _is_int]
        self._int_types = {c: view.types[c] for c in self._ints}
        #: the one key column, whose value is the key's text in the usual case (then
        #: checked at once, without a call)
        self._one_key = self._keys[0] if len(self._keys) == 1 else None
        self._hash = partitioner.unsigned  # read here: a benchmark swaps it

    def __call__(self, key: bytes | None, value: bytes | None, partition: int
                 ) -> tuple[bytes, bytes | None]:
        if key is None:
            raise Skip("no_key", "row without a key")
        try:
            text = key.decode()
        except UnicodeDecodeError:
            raise Skip("bad_key", "row key is not UTF-8") from None
        if self.partitions is not None and (
                self._hash(key) & 0x7FFFFFFF) % self.partitions != partition:
            raise Skip("wrong_partition", f"key {text[:80]!r} belongs to partition "
                       f"{partition_for(key, self.partitions)}, not {partition}")
        if value is None:
            if self.windowed:
                raise Skip("bad_window", "windowed row without a value")
            return key, None  # a tombstone: the row is gone
        # the value, inline (every row a node applies: a restore's time is here)
        if len(value) > MAX_RECORD_BYTES:
            raise Skip("too_large", f"row value is {len(value)} bytes, more than "
                       f"{MAX_RECORD_BYTES}")
        try:
            row = orjson.loads(value)  # stops at 1024 levels: never a RecursionError
        except orjson.JSONDecodeError as exc:
            raise Skip("not_json", f"row value is not JSON: {str(exc)[:80]}") from None
        if type(row) is not dict:
            raise Skip("not_json", f"row value is not a JSON object but "
                       f"{type(row).__name__}")
        for v in row.values():  # flat rows (the usual) need no walk
            if type(v) is dict or type(v) is list:
                if depth(row) > MAX_DEPTH:
                    raise Skip("too_deep", f"row value nests deeper than {MAX_DEPTH}")
                break
        if not (self._one_key is not None and row.get(self._one_key) == text):
            self._check_key(text, row)
        for c in self._ints:
            v = row.get(c)
            if v is not None and not (type(v) is int and -_I64 <= v < _I64):
                raise Skip("wrong_type", f"column {c!r} is {self._int_types[c]}, "
                           f"got {v!r}"[:200])
        for c, t, check in self._types:
            v = row.get(c)
            if v is not None and not check(v):
                raise Skip("wrong_type", f"column {c!r} is {t}, got {v!r}"[:200])
        if self.windowed:
            return store_key(text, _window_start(row)), value
        return key, value

    def _check_key(self, text: str, row: Mapping[str, Any]) -> None:
        texts = []
        for c, kind in zip(self._keys, self._key_kinds, strict=True):
            if c not in row:
                raise Skip("missing_column", f"row without its key column {c!r}")
            texts.append(_key_text(kind, row[c]))
        known = [t for t in texts if t is not None]
        if len(known) < len(texts):  # compare the columns known, where the key splits
            parts = text.split(KEY_SEP)  # unambiguously
            if len(parts) != len(texts) or all(t in (None, p) for t, p in zip(
                    texts, parts, strict=True)):
                return
        elif KEY_SEP.join(known) == text:
            return
        raise Skip("key_mismatch", f"row key {text[:80]!r} is not its key columns "
                   f"{[row[c] for c in self._keys]!r}"[:200])


def check_row(view: View, key: bytes | None, value: bytes | None, partition: int,
              partitions: int | None) -> tuple[bytes, bytes | None]:
    """The store's ``(key, value)`` for a changelog row read from ``partition`` (of
    ``partitions``; None: not checked), value None for a tombstone; Skip if the
    record is not a row of ``view``. The value is stored as it came (not re-encoded:
    orjson would turn integers past 64 bits into floats, a ``decimal(38)`` sum)."""
    return RowCheck(view, partitions)(key, value, partition)
