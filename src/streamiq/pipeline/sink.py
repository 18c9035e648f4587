"""The changelog sink: changed rows of a view, then a marker on every partition.

Implements the changelog contract of :mod:`streamiq.views.base`: key = view key
(``|``-joined), partition = Kafka's default murmur2 partitioner over the key (librdkafka
``murmur2_random``), value = the row as JSON with timestamps as epoch ms, and after each
micro-batch one marker per partition naming the input offsets the batch reflects — read
from the query's offset log (the write-ahead record of exactly the range this batch
read), so a replayed batch rewrites identical rows and identical markers.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from streamiq.views.base import MARKER_HEADER, View, marker_value

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["ChangelogSink", "batch_offsets", "changelog_columns", "producer_conf"]

log = logging.getLogger(__name__)


def producer_conf(kafka: Mapping[str, Any]) -> dict[str, Any]:
    """Idempotent, Java-compatible partitioning, low linger (latency over batching)."""
    conf = dict(kafka)
    conf.update({"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random",
                 "linger.ms": conf.get("linger.ms", 1), "client.id": "streamiq-pipeline"})
    return conf


def changelog_columns(df: DataFrame, view: View) -> DataFrame:
    """The transform's output as ``key`` (string) and ``value`` (JSON string) columns."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DateType, TimestampNTZType, TimestampType

    fields = {f.name: f.dataType for f in df.schema.fields}
    if view.windowed and "window_start" not in fields and "window" in fields:
        df = df.withColumn("window_start", F.unix_millis(F.col("window.start"))) \
               .withColumn("window_end", F.unix_millis(F.col("window.end")))
        fields = {f.name: f.dataType for f in df.schema.fields}
    missing = [c for c in view.columns if c not in fields]
    if missing:
        raise ValueError(f"view {view.name!r}: transform output lacks columns {missing} "
                         f"(has {sorted(fields)})")

    def as_json(c: str) -> Column:
        t = fields[c]
        if isinstance(t, TimestampType | TimestampNTZType):
            return F.unix_millis(F.col(c)).alias(c)
        if isinstance(t, DateType):
            return F.col(c).cast("string").alias(c)
        return F.col(c)

    key = F.concat_ws("|", *[F.coalesce(F.col(c).cast("string"), F.lit(""))
                             for c in view.key_columns])
    value = F.to_json(F.struct(*[as_json(c) for c in view.columns]),
                      {"ignoreNullFields": "false"})
    return df.select(key.alias("key"), value.alias("value"))


def _read_text(spark: SparkSession | None, path: str) -> str | None:
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        p = Path(parsed.path if parsed.scheme else path)
        return p.read_text() if p.exists() else None
    if spark is None:
        raise ValueError(f"reading {path} needs a SparkSession")
    jvm = spark.sparkContext._jvm  # non-local checkpoint (HDFS, S3...): Hadoop FileSystem
    assert jvm is not None
    hpath = jvm.org.apache.hadoop.fs.Path(path)
    fs = hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    if not fs.exists(hpath):
        return None
    stream = fs.open(hpath)
    try:
        text: str = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        return text
    finally:
        stream.close()


def batch_offsets(checkpoint: str, batch_id: int, spark: SparkSession | None = None
                  ) -> dict[str, dict[str, int]] | None:
    """End offsets of micro-batch ``batch_id`` from the query's offset log (None if absent).

    Negative offsets (an untouched partition still at "earliest") become 0: "every
    record before 0 is reflected" is true and is what a reader needs.
    """
    text = _read_text(spark, f"{checkpoint.rstrip('/')}/offsets/{batch_id}")
    if text is None:
        return None
    lines = text.splitlines()
    if len(lines) < 3 or lines[2].strip() in ("", "-"):
        return None
    raw = json.loads(lines[2])
    return {t: {p: max(int(o), 0) for p, o in parts.items()} for t, parts in raw.items()}


class ChangelogSink:
    """``foreachBatch`` function writing one view's changed rows and markers."""

    def __init__(self, view: View, kafka: Mapping[str, Any], partitions: int,
                 checkpoint: str, spark: SparkSession | None = None,
                 flush_timeout: float = 30.0, topic: str | None = None) -> None:
        self.view = view
        self.topic = topic or view.changelog_topic  # real name (with any topic prefix)
        self.partitions = partitions
        self.checkpoint = checkpoint
        self.spark = spark
        self.flush_timeout = flush_timeout
        self._conf = producer_conf(kafka)
        self._producer: Any = None
        self._errors: list[str] = []
        self._lock = threading.Lock()
        self.batches = 0
        self.rows = 0
        self.last_batch_id = -1

    @property
    def producer(self) -> Any:
        if self._producer is None:
            from confluent_kafka import Producer

            self._producer = Producer(self._conf)
        return self._producer

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            with self._lock:
                self._errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    def _flush(self) -> None:
        left = self.producer.flush(self.flush_timeout)
        with self._lock:
            errors, self._errors = self._errors, []
        if left or errors:
            raise RuntimeError(f"view {self.view.name!r}: changelog write failed "
                               f"({left} undelivered; {errors[:3]})")

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        table = df.toArrow()  # the micro-batch runs here: only changed rows come back
        offsets = batch_offsets(self.checkpoint, batch_id, self.spark)
        if offsets is None:
            raise RuntimeError(f"view {self.view.name!r}: no offset log entry for batch "
                               f"{batch_id} under {self.checkpoint}")
        self.write(table.column("key").to_pylist(), table.column("value").to_pylist(),
                   batch_id, offsets)

    def write(self, keys: list[str], values: list[str], batch_id: int,
              offsets: Mapping[str, Mapping[str, int]]) -> None:
        """Rows first (flushed), then the markers — a marker never precedes its rows."""
        p = self.producer
        produce = p.produce
        cb = self._on_delivery
        for k, v in zip(keys, values, strict=True):
            try:
                produce(self.topic, value=v, key=k, on_delivery=cb)
            except BufferError:
                p.poll(0.05)
                produce(self.topic, value=v, key=k, on_delivery=cb)
        if keys:
            self._flush()
        marker = marker_value(batch_id, {t: {int(q): o for q, o in po.items()}
                                         for t, po in offsets.items()})
        for part in range(self.partitions):
            produce(self.topic, value=marker, key=None, partition=part,
                    headers=[(MARKER_HEADER, b"1")], on_delivery=cb)
        self._flush()
        self.batches += 1
        self.rows += len(keys)
        self.last_batch_id = batch_id
        log.debug("view %s batch %d: %d rows, offsets %s", self.view.name, batch_id,
                  len(keys), offsets)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
            self._producer = None
