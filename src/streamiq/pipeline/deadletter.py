"""Parsing, validation and the dead-letter path of a view's input.

The hot path stays in the JVM and reads the input once: each view's query parses the
value with ``from_json`` (PERMISSIVE, with a corrupt-record column), keeps the valid
rows and counts the invalid ones with an observed metric (``streamiq_dead_letters``).
Only when a micro-batch reports invalid records is that batch's exact offset range
(from the query progress, or the offset log after a restart) re-read as a *batch*
query to find them, give each a reason and write them to ``streamiq-dead-letters``
(:mod:`~streamiq.pipeline.deadletter_record`: the record's key and value as raw bytes,
UTF-8 text or base64, truncated to fit the topic's ``max.message.bytes``)::

    {"reason", "view", "topic", "partition", "offset", "timestamp", "key", "key_encoding",
     "key_bytes", "value", "value_encoding", "value_bytes", "truncated"}

The input key is never decoded (views read the value only): a key that is not UTF-8
is carried as bytes, and written in base64 when its record is dead-lettered.

Delivery to the dead-letter topic is at-least-once: after a crash the batches since
the last recorded one are scanned again.

What is invalid, in the order the reason names it: a null value; a value longer than
:data:`MAX_VALUE_BYTES`; a value that is not valid UTF-8; not a JSON object (including
empty, ``null``, non-object JSON, and JSON nested deeper than Jackson's limit); a
field of the wrong type (including an integer beyond BIGINT); a missing required
field; a non-finite number (``NaN``, ``Infinity``, ``1e309``) in *any* floating-point
field of the schema (checked for every view: such a value poisons every sum over its
key); then the view's ``checks`` in order, among them the numeric ranges of
``streamiq.views.limits`` that keep the aggregation from overflowing. Every expression
here is total (comparisons, ``isnan``, ``coalesce``): nothing in validation can raise
under ANSI arithmetic, so no input record can fail a micro-batch, and a replayed batch
cannot crash-loop the pipeline.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamiq.pipeline.deadletter_record import build, reason_class
from streamiq.pipeline.deadletter_writer import DeadLetterWriter, RateLimitedLog
from streamiq.pipeline.java_kafka import source_options
from streamiq.views.base import View

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "CORRUPT", "DEAD_LETTER_TOPIC", "MAX_VALUE_BYTES", "METRIC", "RAW_VALUE", "DeadLetters",
    "field_names",
    "float_fields", "parse_input", "reason_column", "valid_column",
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
    for sql, _ in view.checks:
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
    for sql, reason in view.checks:
        r = r.when(~F.coalesce(F.expr(sql), F.lit(False)), F.lit(f"check failed: {reason}"))
    return r


class DeadLetters:
    """Finds and writes the invalid records of given offset ranges; counts them."""

    def __init__(self, spark: SparkSession, view: View, kafka: Mapping[str, Any],
                 checkpoint: str, source_topics: tuple[str, ...] | None = None,
                 topic: str = DEAD_LETTER_TOPIC) -> None:
        self.spark = spark
        self.view = view
        self.source_topics = source_topics or view.source_topics  # real (prefixed) names
        self.topic = topic
        self.kafka = dict(kafka)
        self.state_file = Path(checkpoint) / "streamiq-dead-letters.json"
        self.count = 0  # invalid records seen by the query (observed metric)
        self.written = 0  # dead letters written by this process
        self.reasons: Counter[str] = Counter()  # written, by reason class
        self._writer: DeadLetterWriter | None = None
        self._lock = threading.Lock()

    # -- progress of the dead-letter scan: last micro-batch whose bad records were written
    def last_batch(self) -> int:
        try:
            return int(json.loads(self.state_file.read_text())["batch_id"])
        except (OSError, ValueError, KeyError):
            return -1

    def record(self, batch_id: int) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"batch_id": batch_id}))
        os.replace(tmp, self.state_file)

    def _bad_records(self, start: Mapping[str, Any] | None, end: Mapping[str, Any]) -> Any:
        """The invalid records of offsets [start, end): an Arrow table, key and value as
        the raw bytes (never decoded in Spark or Arrow)."""
        from pyspark.sql import functions as F

        start_json = json.dumps(start) if start else "earliest"
        # an end still at "earliest" (-2) means nothing was read from that partition
        end = {t: {p: max(int(o), 0) for p, o in po.items()} for t, po in end.items()}
        raw = (self.spark.read.format("kafka").options(**source_options(self.kafka))
               .option("subscribe", ",".join(self.source_topics))
               .option("startingOffsets", start_json)
               .option("endingOffsets", json.dumps(end))
               .option("failOnDataLoss", "false").load())
        parsed = parse_input(raw, self.view)
        return parsed.where(~valid_column(self.view)).select(
            reason_column(self.view).alias("reason"),
            F.col("_streamiq_topic").alias("topic"),
            F.col("_streamiq_partition").alias("partition"),
            F.col("_streamiq_offset").alias("offset"),
            F.unix_millis("kafka_timestamp").alias("timestamp"),
            F.col("_streamiq_key").alias("key"), F.col(RAW_VALUE).alias("value"),
        ).toArrow()

    def scan(self, start: Mapping[str, Any] | None, end: Mapping[str, Any]) -> int:
        """Write the invalid records of offsets [start, end) (start None: earliest)."""
        if self._writer is None:
            self._writer = DeadLetterWriter(self.kafka, self.topic)
        table = self._bad_records(start, end)
        rows = table.to_pylist()  # strings are Spark's own (valid UTF-8); key/value bytes
        letters = [(why, build(why, self.view.name, r["topic"], r["partition"], r["offset"],
                               r["timestamp"], r["key"], r["value"], self._writer.max_bytes))
                   for r in rows for why in [r["reason"] or "invalid"]]
        self._writer.write(letters)
        with self._lock:
            self.written += len(letters)
            self.reasons.update(reason_class(reason) for reason, _ in letters)
        for reason, letter in letters:
            _LOG.warn("dead letter (view %s, %s%s): %s", self.view.name, reason,
                      ", truncated" if letter.truncated else "",
                      letter.value[:300].decode("utf-8", "replace"))
        return len(letters)
