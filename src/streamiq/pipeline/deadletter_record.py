"""One dead letter: an input record's bytes as a JSON document that always fits, in Spark SQL.

:func:`letter_columns` turns a bad input record (any bytes as key and value, any size up
to the broker's limit) into the dead-letter topic's record, computed by Spark (Spark's
Kafka sink writes it; no Python per record)::

    {"reason", "view", "topic", "partition", "offset", "timestamp",
     "key", "key_encoding", "key_bytes", "value", "value_encoding", "value_bytes",
     "truncated"}

``key``/``value`` hold the record's bytes as text when they are valid UTF-8
(``*_encoding`` ``"utf-8"``), else in base64 (``"base64"``); null stays null.
``*_bytes`` is the original size. The record's Kafka key is the input key's first
:data:`KEY_MAX` bytes. When the whole document would not fit under ``max_bytes`` (less
:data:`RECORD_OVERHEAD` and the key) it is written ``"truncated": true``: the key cut to
its first :data:`KEY_MAX` bytes, the value to what is left, counted so that JSON's
escapes (6 bytes at most per byte of text) or base64 (4 per 3 bytes) still fit (UTF-8
text is cut between characters); topic, partition and offset always
name the original. When even that does not fit (a limit below the metadata) the
document holds the metadata alone, its reason cut to 200 characters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["KEY_MAX", "RECORD_OVERHEAD", "letter_columns", "reason_class"]

#: bytes of the input key kept in a truncated dead letter (and as its Kafka key)
KEY_MAX = 1024
#: a Kafka record batch's framing around one record (61-byte batch header, the record's
#: varints and attributes, the headers Spark's sink adds none of), with room to spare
RECORD_OVERHEAD = 256
_ESCAPED = 6  # the most bytes JSON writes for one character (\u0000)


def _utf8(raw: Column) -> Column:
    from pyspark.sql import functions as F

    return F.coalesce(F.is_valid_utf8(raw.cast("string")), F.lit(False))


def _head(raw: Column, n: Column) -> Column:
    """The text of ``raw``'s first ``n`` bytes (``raw`` valid UTF-8), whole characters
    only: a character is at most 4 bytes, so one of the 4 shortest cuts is valid."""
    from pyspark.sql import functions as F

    cuts = [F.substring(raw, 1, F.greatest(n - i, F.lit(0))).cast("string") for i in range(4)]
    return F.coalesce(*[F.when(F.is_valid_utf8(c), c) for c in cuts])


def _encoded(raw: Column, text_bytes: Column | None = None,
             base64_bytes: Column | None = None) -> list[Column]:
    """``raw`` as (text, encoding): its text if valid UTF-8 (of its first ``text_bytes``
    bytes when given), else base64 (of its first ``base64_bytes`` bytes when given)."""
    from pyspark.sql import functions as F

    utf8 = _utf8(raw)
    text = raw.cast("string") if text_bytes is None else _head(raw, text_bytes)
    data = raw if base64_bytes is None else F.substring(raw, 1, base64_bytes)
    # one line: Spark chunks base64 into 76-character lines unless told not to
    # (spark.sql.chunkBase64String.enabled), and JSON would escape each line break
    b64 = F.translate(F.base64(data), "\r\n", "")
    return [F.when(raw.isNull(), None).when(utf8, text).otherwise(b64),
            F.when(raw.isNull(), None).when(utf8, F.lit("utf-8")).otherwise(F.lit("base64"))]


def _doc(meta: list[Column], key: list[Column], value: list[Column], sizes: list[Column],
         truncated: bool) -> Column:
    from pyspark.sql import functions as F

    fields = [*meta, key[0].alias("key"), key[1].alias("key_encoding"), sizes[0],
              value[0].alias("value"), value[1].alias("value_encoding"), sizes[1],
              F.lit(truncated).alias("truncated")]
    return F.to_json(F.struct(*fields), {"ignoreNullFields": "false"})


def letter_columns(reason: Column, view: str, topic: Column, partition: Column,
                   offset: Column, timestamp: Column, key: Column, value: Column,
                   max_bytes: int) -> tuple[Column, Column]:
    """The dead letter's Kafka key (binary) and value (JSON text) for one input record
    (``key``/``value``: its raw binary), under ``max_bytes`` with
    :data:`RECORD_OVERHEAD` to spare."""
    from pyspark.sql import functions as F

    def meta(why: Column) -> list[Column]:
        return [why.alias("reason"), F.lit(view).alias("view"), topic.alias("topic"),
                partition.alias("partition"), offset.alias("offset"),
                timestamp.alias("timestamp")]

    sizes = [F.coalesce(F.octet_length(key), F.lit(0)).alias("key_bytes"),
             F.coalesce(F.octet_length(value), F.lit(0)).alias("value_bytes")]
    kafka_key = F.substring(key, 1, KEY_MAX)
    room = F.lit(max_bytes - RECORD_OVERHEAD) - F.coalesce(F.octet_length(kafka_key), F.lit(0))
    whole = _doc(meta(reason), _encoded(key), _encoded(value), sizes, False)
    short_key = _encoded(key, F.lit(KEY_MAX), F.lit(KEY_MAX))
    empty = _doc(meta(reason), short_key, _encoded(value, F.lit(0), F.lit(0)), sizes, True)
    left = F.greatest(room - F.octet_length(empty), F.lit(0))
    # JSON writes a byte of UTF-8 text as at most 6 bytes (an escape), base64 3 as 4
    value_cut = _encoded(value, (left / _ESCAPED).cast("int"), (left / 4).cast("int") * 3)
    cut = _doc(meta(reason), short_key, value_cut, sizes, True)
    stub = _doc(meta(F.substring(reason, 1, 200)), [F.lit(None), F.lit(None)],
                [F.lit(None), F.lit(None)], sizes, True)
    fits = F.octet_length(whole) <= room
    doc = F.when(fits, whole).when(F.octet_length(empty) <= room, cut).otherwise(stub)
    out_key = F.when(fits | (F.octet_length(empty) <= room), kafka_key)
    return out_key, doc


def reason_class(reason: str) -> str:
    """A reason without the field names it lists (a bounded metric label)."""
    head = reason.split(":", 1)[0]
    return head if head != "check failed" else reason
