"""What each changelog row reflects of the input: its positions and time, as record headers.

For a view whose aggregation the pipeline builds (a transform that takes ``extra``:
the built-in views, and any :class:`~streamiq.views.base.View` that declares it), each
aggregated row also carries, per input partition, the offset of the last record it
folded (``max(CASE WHEN topic = t AND partition = p THEN offset END)``, one aggregate
per input partition) and the newest input timestamp it folded. The changelog record
carries them as headers, so the row itself stays the view's columns:

* :data:`~streamiq.views.base.POSITION_HEADER`: ``topic:partition:offset`` joined by
  ``,``, the partitions the key has records from (the offset is the last one folded,
  inclusive);
* :data:`~streamiq.views.base.TIME_HEADER`: the newest input record's Kafka timestamp
  in epoch milliseconds, as decimal text.

A key's records of one input partition reach one aggregation task in offset order, so
a stored row whose position for partition ``p`` is at least ``o`` reflects every record
of its key up to ``o`` in ``p``: a read of that key with position ``p:o`` is answered
as soon as the row is stored, without waiting for the batch's marker
(docs/design.md, "Position tokens"). The headers say nothing about other keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from streamiq.views.base import POSITION_HEADER, TIME_HEADER

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["TS_COLUMN", "aggregates", "headers", "names"]

Input = tuple[str, int]  # (topic, partition)
_POS = "_streamiq_pos_"
#: the newest input timestamp a row folded (epoch ms)
TS_COLUMN = "_streamiq_ts"


def names(inputs: Sequence[Input]) -> list[str]:
    """The extra columns' names, in order."""
    return [f"{_POS}{i}" for i in range(len(inputs))] + [TS_COLUMN]


def aggregates(inputs: Sequence[Input]) -> dict[str, Column]:
    """The extra aggregates, by name, over :func:`streamiq.pipeline.deadletter.parse_input`'s
    columns (``_streamiq_topic``, ``_streamiq_partition``, ``_streamiq_offset``,
    ``kafka_timestamp``)."""
    from pyspark.sql import functions as F

    out = {name: F.max(F.when((F.col("_streamiq_topic") == t)
                              & (F.col("_streamiq_partition") == p), F.col("_streamiq_offset")))
           for name, (t, p) in zip(names(inputs), inputs, strict=False)}
    out[TS_COLUMN] = F.max(F.unix_millis(F.col("kafka_timestamp")))
    return out


def headers(inputs: Sequence[Input], more: Sequence[Column] = ()) -> Column:
    """The record headers made of the extra columns (``array<struct<key, value>>``), and
    ``more`` header structs, each left out of a row where its value is null."""
    from pyspark.sql import functions as F

    parts = [F.when(F.col(name).isNotNull(), F.concat(F.lit(f"{t}:{p}:"),
                                                      F.col(name).cast("string")))
             for name, (t, p) in zip(names(inputs), inputs, strict=False)]
    pos = F.concat_ws(",", *parts) if parts else F.lit("")
    out = F.array(
        F.struct(F.lit(POSITION_HEADER).alias("key"), pos.cast("binary").alias("value")),
        F.struct(F.lit(TIME_HEADER).alias("key"),
                 F.col(TS_COLUMN).cast("string").cast("binary").alias("value")), *more)
    return F.filter(out, lambda h: h["value"].isNotNull()) if more else out
