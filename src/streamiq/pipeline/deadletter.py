"""Parsing, validation and the dead-letter path of a view's input.

The hot path stays in the JVM: each view's query parses the value with ``from_json``
(PERMISSIVE, with a corrupt-record column) and keeps the valid rows. The invalid ones
are found by a sibling query over the same input (:func:`dead_letter_stream`, one per
distinct input and validation, micro-batch: dead letters need no milliseconds), which
gives each a reason and writes it to ``streamiq-dead-letters`` through Spark's Kafka
sink (:mod:`~streamiq.pipeline.deadletter_record`: the record's key and value as raw
bytes, UTF-8 text or base64, truncated to fit the topic's ``max.message.bytes``)::

    {"reason", "view", "topic", "partition", "offset", "timestamp", "key", "key_encoding",
     "key_bytes", "value", "value_encoding", "value_bytes", "truncated"}

Each of its batches reports how many it wrote by reason class, and one sample, as an
observed metric (:data:`METRIC`), for the pipeline's counters and its rate-limited log.
The input key is never decoded (views read the value only): a key that is not UTF-8
is carried as bytes, and written in base64 when its record is dead-lettered.

Delivery to the dead-letter topic is at-least-once: the sibling query's checkpoint
commits after its sink wrote, so a crash redoes at most its batch in flight.

What is invalid, in the order the reason names it: a null value; a value longer than
:data:`MAX_VALUE_BYTES`; a value that is not valid UTF-8; not a JSON object (including
empty, ``null``, non-object JSON, and JSON nested deeper than Jackson's limit); a
field of the wrong type (including an integer beyond BIGINT); a missing required
field; a non-finite number (``NaN``, ``Infinity``, ``1e309``) in *any* floating-point
field of the schema (checked for every view: such a value poisons every sum over its
key); then the view's ``checks`` in order, among them the numeric ranges of
``streamiq.views.limits`` that keep the aggregation from overflowing. Every expression
here is total (comparisons, ``isnan``, ``coalesce``): nothing in validation can raise
under ANSI arithmetic, so no input record can fail a batch, and a replayed batch
cannot crash-loop the pipeline.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streamiq.pipeline.deadletter_record import letter_columns
from streamiq.pipeline.deadletter_writer import RateLimitedLog
from streamiq.pipeline.ticks import is_tick
from streamiq.views.base import TICK_PREFIX, View

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = [
    "CORRUPT",
    "DEAD_LETTER_TOPIC",
    "MAX_VALUE_BYTES",
    "METRIC",
    "RAW_VALUE",
    "DeadLetterCounts",
    "checks",
    "dead_letter_stream",
    "field_names",
    "float_fields",
    "parse_input",
    "reason_classes",
    "reason_column",
    "valid_column",
]

log = logging.getLogger(__name__)
_LOG = RateLimitedLog(log)  # one dead letter logged per interval, the rest counted

DEAD_LETTER_TOPIC = "streamiq-dead-letters"
METRIC = "streamiq_dead_letters"
CORRUPT = "_streamiq_corrupt"
RAW_VALUE = "_streamiq_value"
#: longest input value a view accepts: a changelog record holds the key columns twice
#: (key and value), so rows made from larger values could exceed the changelog topic's
#: and the producer's limit (about 1 MB by default) and fail the sink's batch
MAX_VALUE_BYTES = 400_000


def parse_input(raw: DataFrame, view: View) -> DataFrame:
    """Kafka rows -> the value's fields (top level), :data:`CORRUPT`, ``kafka_timestamp``
    and the raw record as ``_streamiq_key/value/topic/partition/offset``."""
    from pyspark.sql import functions as F

    schema = f"{view.value_schema}, {CORRUPT} STRING"
    return raw.select(
        F.from_json(F.col("value").cast("string"), schema,
                    {"columnNameOfCorruptRecord": CORRUPT, "mode": "PERMISSIVE"}).alias("v"),
        F.col("timestamp").alias("kafka_timestamp"),
        *[F.col(c).alias(f"_streamiq_{c}") for c in ("key", "value", "topic", "partition",
                                                      "offset")],
    ).select("v.*", "kafka_timestamp", *[f"_streamiq_{c}" for c in (
        "key", "value", "topic", "partition", "offset")])


def field_names(view: View) -> list[str]:
    """Top-level field names of the view's value schema."""
    from pyspark.sql.types import StructType, _parse_datatype_string

    schema = _parse_datatype_string(view.value_schema)
    assert isinstance(schema, StructType)
    return [f.name for f in schema.fields]


def float_fields(view: View) -> list[str]:
    """Top-level DOUBLE/FLOAT fields of the view's value schema (must be finite)."""
    from pyspark.sql.types import DoubleType, FloatType, StructType, _parse_datatype_string

    schema = _parse_datatype_string(view.value_schema)
    assert isinstance(schema, StructType)
    return [f.name for f in schema.fields if isinstance(f.dataType, DoubleType | FloatType)]


def _too_large() -> Column:
    """True when the value is longer than :data:`MAX_VALUE_BYTES` (false when null)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.octet_length(F.col(RAW_VALUE)) > MAX_VALUE_BYTES, F.lit(False))


def _utf8_ok() -> Column:
    """True when the value's bytes are valid UTF-8 (or null). Spark's cast of BINARY to
    STRING keeps invalid bytes, and the sink would fail decoding them in a key."""
    from pyspark.sql import functions as F

    return F.coalesce(F.is_valid_utf8(F.col(RAW_VALUE).cast("string")), F.lit(True))


def _non_finite(name: str) -> Column:
    """True when the field holds NaN or +-Infinity (false when null or finite)."""
    from pyspark.sql import functions as F

    c = F.col(f"`{name}`")
    return F.coalesce(F.isnan(c) | (F.abs(c) == F.lit(float("inf"))), F.lit(False))


def checks(view: View) -> list[tuple[str, str]]:
    """The view's ``checks``, then: no string key column starts with the ticks' reserved
    prefix (``views/base.TICK_PREFIX``: a row of such a key would be taken for a tick's)."""
    reserved = [(f"NOT startswith(`{c}`, '{TICK_PREFIX}')",
                 f"{c} starts with the reserved {TICK_PREFIX!r}")
                for c in view.key_columns if _string_field(view.value_schema, c)]
    return [*view.checks, *reserved]


def _string_field(schema: str, name: str) -> bool:
    """``name`` is a top-level STRING field of a DDL ``schema`` (read without Spark)."""
    return re.search(rf"(^|,)\s*`?{re.escape(name)}`?\s+string\s*(,|$)", schema,
                     re.IGNORECASE) is not None


def valid_column(view: View) -> Column:
    """True for records the view accepts (JSON object of the right types, required,
    finite floating-point fields, checks)."""
    from pyspark.sql import functions as F

    cond = (F.col(RAW_VALUE).isNotNull() & ~_too_large() & _utf8_ok()
            & F.col(CORRUPT).isNull())
    for c in view.required:
        cond = cond & F.col(f"`{c}`").isNotNull()
    for c in float_fields(view):
        cond = cond & ~_non_finite(c)
    for sql, _ in checks(view):
        cond = cond & F.coalesce(F.expr(sql), F.lit(False))
    return cond


def reason_column(view: View) -> Column:
    """Why a record is invalid (null for valid ones), on :func:`parse_input`'s output."""
    from pyspark.sql import functions as F

    names = field_names(view)
    loose = "STRUCT<" + ", ".join(f"`{n}`: STRING" for n in names) + ">"
    as_text = F.from_json(F.col(RAW_VALUE).cast("string"), loose)
    wrong = F.concat_ws(", ", *[F.when(F.col(f"`{n}`").isNull() & as_text[n].isNotNull(),
                                       F.lit(n)) for n in names])
    r = F.when(F.col(RAW_VALUE).isNull(), F.lit("null value"))
    r = r.when(_too_large(), F.lit(f"value too large (over {MAX_VALUE_BYTES} bytes)"))
    r = r.when(~_utf8_ok(), F.lit("value is not valid UTF-8"))
    r = r.when(as_text.isNull() | (F.col(CORRUPT).isNotNull() & (wrong == "")),
               F.lit("invalid JSON (not a JSON object)"))
    r = r.when(wrong != "", F.concat(F.lit("wrong type for field(s): "), wrong))
    if view.required:
        missing = F.concat_ws(", ", *[F.when(F.col(f"`{n}`").isNull(), F.lit(n))
                                      for n in view.required])
        r = r.when(missing != "", F.concat(F.lit("missing field(s): "), missing))
    floats = float_fields(view)
    if floats:
        bad = F.concat_ws(", ", *[F.when(_non_finite(n), F.lit(n)) for n in floats])
        r = r.when(bad != "", F.concat(
            F.lit("not a finite number (NaN or Infinity) in field(s): "), bad))
    for sql, reason in checks(view):
        r = r.when(~F.coalesce(F.expr(sql), F.lit(False)), F.lit(f"check failed: {reason}"))
    return r


def reason_classes(view: View) -> list[str]:
    """Every reason class :func:`reason_column` can give (bounded metric labels)."""
    out = ["null value", f"value too large (over {MAX_VALUE_BYTES} bytes)",
           "value is not valid UTF-8", "invalid JSON (not a JSON object)",
           "wrong type for field(s)"]
    out += ["missing field(s)"] if view.required else []
    out += ["not a finite number (NaN or Infinity) in field(s)"] if float_fields(view) else []
    return out + [f"check failed: {reason}" for _, reason in checks(view)]


def dead_letter_stream(raw: DataFrame, view: View, max_bytes: int) -> DataFrame:
    """The dead letters of Kafka rows ``raw`` (a ``format("kafka")`` source): ``key``
    (binary) and ``value`` (JSON text), with :data:`METRIC` observed per batch (a count
    per reason class, and one ``sample``)."""
    from pyspark.sql import functions as F

    parsed = parse_input(raw, view)
    reason = F.coalesce(reason_column(view), F.lit("invalid"))
    bad = parsed.where(~valid_column(view) & ~is_tick()).withColumn("_reason", reason)
    cls = F.when(F.col("_reason").startswith("check failed:"), F.col("_reason")).otherwise(
        F.substring_index(F.col("_reason"), ":", 1))
    sample = F.concat(F.col("_reason"), F.lit(": "), F.substring(
        F.coalesce(F.col(RAW_VALUE).cast("string"), F.lit("null")), 1, 300))
    counted = bad.withColumn("_class", cls).observe(
        METRIC, *[F.count_if(F.col("_class") == c).alias(c) for c in reason_classes(view)],
        F.min(sample).alias("sample"))
    key, value = letter_columns(
        F.col("_reason"), view.name, F.col("_streamiq_topic"), F.col("_streamiq_partition"),
        F.col("_streamiq_offset"), F.unix_millis("kafka_timestamp"), F.col("_streamiq_key"),
        F.col(RAW_VALUE), max_bytes)
    return counted.select(key.alias("key"), value.alias("value"))


class DeadLetterCounts:
    """The dead letters one sibling query wrote, by reason class; a rate-limited log."""

    def __init__(self, view: View, topic: str) -> None:
        self.view = view
        self.topic = topic
        self.written = 0
        self.reasons: Counter[str] = Counter()

    def batch(self, metric: Mapping[str, Any]) -> int:
        """Count one batch's observed metric; the dead letters it wrote."""
        got = {c: int(metric.get(c) or 0) for c in reason_classes(self.view)}
        n = sum(got.values())
        if n:
            self.written += n
            self.reasons.update({c: k for c, k in got.items() if k})
            _LOG.warn("view %s: %d dead letter(s) -> %s (%d in all); one: %s", self.view.name,
                      n, self.topic, self.written, metric.get("sample"))
        return n
