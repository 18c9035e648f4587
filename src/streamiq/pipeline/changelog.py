"""A view's rows as changelog records, computed in Spark SQL for Spark's Kafka sink.

The changelog contract (:mod:`streamiq.views.base`) as columns of the written frame, so
no Python runs per row (Spark's Kafka sink, ``format("kafka")``, writes them):

* ``key``: the key columns' Spark text (``CAST(c AS STRING)``; null as the empty text)
  joined by ``|``;
* ``value``: the row as one JSON object (``to_json``, nulls written as ``null``), its
  columns in the frame's order; a ``window`` struct becomes ``window_start`` and
  ``window_end``, and every top-level timestamp epoch milliseconds (``unix_millis``);
  decimals are written with their exact digits (a ``decimal(38,0)`` is a JSON integer)
  and a NaN or infinite float or double as ``null``, as JSON has no such number;
* no ``partition`` column: the sink's producer (Kafka's Java client) then takes its
  default partitioner, murmur2 over the key bytes, as every node computes it
  (:func:`streamiq.kafka.partitioner.partition_for`);
* ``headers`` when the pipeline controls the aggregation
  (:mod:`streamiq.pipeline.positions`): the input positions and time a row reflects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamiq.views.base import KEY_SEP, View

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["changelog_columns", "key_column", "value_column", "view_rows"]

#: ``to_json`` writes null fields (its default leaves them out)
_JSON_OPTIONS = {"ignoreNullFields": "false"}


def key_column(key: Sequence[str]) -> Column:
    """The record key: the key columns' text, ``|``-joined (null as ``""``)."""
    from pyspark.sql import functions as F

    parts = [F.coalesce(F.col(f"`{k}`").cast("string"), F.lit("")) for k in key]
    return parts[0] if len(parts) == 1 else F.concat_ws(KEY_SEP, *parts)


def _field(df: DataFrame, name: str) -> list[Column]:
    """What column ``name`` of ``df`` is written as (its JSON field or fields)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        DoubleType,
        FloatType,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    c = F.col(f"`{name}`")
    t = df.schema[name].dataType
    if name == "window" and isinstance(t, StructType):
        return [F.unix_millis(c["start"].cast("timestamp")).alias("window_start"),
                F.unix_millis(c["end"].cast("timestamp")).alias("window_end")]
    if isinstance(t, TimestampType | TimestampNTZType):
        return [F.unix_millis(c.cast("timestamp")).alias(name)]
    if isinstance(t, DoubleType | FloatType):
        finite = ~F.isnan(c) & (c != F.lit(float("inf"))) & (c != F.lit(float("-inf")))
        return [F.when(finite, c).alias(name)]
    return [c.alias(name)]


def value_column(df: DataFrame, columns: Sequence[str] | None = None) -> Column:
    """The record value: ``columns`` (default: all of ``df``'s) as one JSON object."""
    from pyspark.sql import functions as F

    fields = [f for name in (columns or df.columns) for f in _field(df, name)]
    return F.to_json(F.struct(*fields), _JSON_OPTIONS)


def changelog_columns(df: DataFrame, key: Sequence[str], columns: Sequence[str] | None = None,
                      headers: Column | None = None) -> DataFrame:
    """``df`` as the records Spark's Kafka sink writes: ``key``, ``value`` (both text)
    and, when given, ``headers`` (``array<struct<key: string, value: binary>>``).
    ``columns``: the row's columns, in order (default: all of ``df``'s)."""
    cols = [key_column(key).alias("key"), value_column(df, columns).alias("value")]
    if headers is not None:
        cols.append(headers.alias("headers"))
    return df.select(*cols)


def view_rows(df: DataFrame, view: View, keep: Sequence[str] = ()) -> DataFrame:
    """A transform's output reduced to the view's columns, in order, then ``keep`` (a
    ``window`` struct may stand for ``window_start``/``window_end``: its bounds are
    written)."""
    cols = list(view.columns)
    if view.windowed and "window" in df.columns and "window_start" not in df.columns:
        at = cols.index("window_start")
        cols[at:at + 2] = ["window"]
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"view {view.name!r}: transform output lacks columns {missing} "
                         f"(has {sorted(df.columns)})")
    return df.select(*cols, *keep)
