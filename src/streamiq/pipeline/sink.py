"""The changelog writer: changed rows of a view, then a marker on every partition.

Implements the changelog contract of :mod:`streamiq.views.base`: key = view key
(``|``-joined), partition = Kafka's default murmur2 partitioner over the key (librdkafka
``murmur2_random``), value = the row as JSON with timestamps as epoch ms (a ``window``
struct becomes ``window_start``/``window_end``), and after each micro-batch one marker
per partition naming the input offsets the batch reflects, read from the query's
offset log (the write-ahead record of exactly the range this batch read), so a
replayed batch rewrites identical rows and identical markers.

This is the only code that writes a changelog. The ``streamiq`` data source
(``pipeline/datasource.py``) calls :func:`produce_rows` in its writers' ``write`` on
executors (each task flushes its rows before it returns) and :func:`produce_markers` in
``commit`` on the driver, which Spark runs only after every task returned.

Rows are encoded from Arrow batches in the executor's Python worker: the key columns
are cast to text and joined by Arrow compute (Arrow's text of strings, integers,
booleans, dates and decimals is Spark's), the value by orjson (Decimals written as
their exact digits, as Spark's ``to_json`` does: a ``decimal(38,0)`` is a JSON integer).
"""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from streamiq.kafka.clientlog import logged
from streamiq.views.base import KEY_SEP, MARKER_HEADER, MARKER_KEY, View, marker_value

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = ["RowEncoder", "batch_offsets", "changelog_columns", "produce_markers",
           "produce_rows", "producer_conf", "view_rows"]

log = logging.getLogger(__name__)


def producer_conf(kafka: Mapping[str, Any]) -> dict[str, Any]:
    """Idempotent, Java-compatible partitioning, low linger (latency over batching)."""
    conf = dict(kafka)
    conf.update({"enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random",
                 "linger.ms": conf.get("linger.ms", 1), "client.id": "streamiq-pipeline"})
    return conf


def _read_text(path: str) -> str | None:
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        p = Path(parsed.path if parsed.scheme else path)
        return p.read_text() if p.exists() else None
    from pyarrow import fs  # a non-local checkpoint (HDFS, S3, GCS): Arrow's filesystems

    filesystem, inner = fs.FileSystem.from_uri(path)
    if filesystem.get_file_info(inner).type == fs.FileType.NotFound:
        return None
    with filesystem.open_input_stream(inner) as f:
        return bytes(f.read()).decode()


def batch_offsets(checkpoint: str, batch_id: int) -> dict[str, dict[str, int]] | None:
    """End offsets of micro-batch ``batch_id`` from the query's offset log (None if absent).

    The log holds a version line, the batch's metadata and one line per source; the
    Kafka-shaped ones (``{topic: {partition: offset}}``) are merged and others (a rate
    source's number, a file source's log index) are left out. Negative offsets (an
    untouched partition still at "earliest") become 0: "every record before 0 is
    reflected" is true and is what a reader needs.
    """
    text = _read_text(f"{checkpoint.rstrip('/')}/offsets/{batch_id}")
    if text is None:
        return None
    out: dict[str, dict[str, int]] = {}
    for line in text.splitlines()[2:]:
        raw = json.loads(line) if line.strip() not in ("", "-") else None
        if isinstance(raw, dict) and all(isinstance(v, dict) for v in raw.values()):
            for t, parts in raw.items():
                out.setdefault(t, {}).update({p: max(int(o), 0) for p, o in parts.items()})
    return out


def _json_default(v: Any) -> Any:
    import orjson

    if isinstance(v, Decimal):
        return orjson.Fragment(str(v))
    if isinstance(v, bytes):
        return base64.b64encode(v).decode()
    raise TypeError(f"cannot write {type(v).__name__} as JSON")


def _epoch_ms(arr: pa.Array) -> list[int | None]:
    import pyarrow as pa
    import pyarrow.compute as pc

    micros = pc.cast(pc.cast(arr, pa.timestamp("us", tz="UTC")), pa.int64()).to_pylist()
    return [None if m is None else m // 1000 for m in micros]  # floor, as unix_millis


class RowEncoder:
    """Arrow batches of a view's rows -> changelog keys and JSON values."""

    def __init__(self, names: Sequence[str], key: Sequence[str]) -> None:
        self.key = tuple(key)
        #: a ``window`` struct is written as its epoch-ms bounds, in its place
        self.names = tuple(n for c in names
                           for n in (("window_start", "window_end") if c == "window" else (c,)))

    def keys(self, batch: pa.RecordBatch) -> list[str]:
        import pyarrow as pa
        import pyarrow.compute as pc

        parts = [pc.fill_null(pc.cast(batch.column(k), pa.string()), "") for k in self.key]
        joined = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, KEY_SEP)
        keys: list[str] = joined.to_pylist()
        return keys

    def _column(self, batch: pa.RecordBatch, name: str) -> list[Any]:
        import pyarrow as pa

        if name in ("window_start", "window_end") and "window" in batch.schema.names:
            arr = batch.column("window").field("start" if name == "window_start" else "end")
        else:
            arr = batch.column(name)
        if pa.types.is_timestamp(arr.type):
            return _epoch_ms(arr)
        values: list[Any] = arr.to_pylist()
        return values

    def values(self, batch: pa.RecordBatch) -> list[bytes]:
        import orjson

        names = self.names
        cols = [self._column(batch, n) for n in names]
        dumps, default = orjson.dumps, _json_default
        return [dumps(dict(zip(names, row, strict=True)), default=default)
                for row in zip(*cols, strict=True)]


def view_rows(df: DataFrame, view: View) -> DataFrame:
    """A transform's output reduced to the view's columns, in order (a ``window`` struct
    may stand for ``window_start``/``window_end``: the writer writes its bounds)."""
    cols = list(view.columns)
    if view.windowed and "window" in df.columns and "window_start" not in df.columns:
        at = cols.index("window_start")
        cols[at:at + 2] = ["window"]
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"view {view.name!r}: transform output lacks columns {missing} "
                         f"(has {sorted(df.columns)})")
    return df.select(*cols)


def changelog_columns(df: DataFrame, view: View) -> DataFrame:
    """A view's frame as ``key`` and ``value`` (JSON) columns, encoded as the sink does."""
    import pyarrow as pa

    rows = view_rows(df, view)
    encoder = RowEncoder(rows.columns, view.key_columns)

    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for b in batches:
            yield pa.record_batch([pa.array(encoder.keys(b), pa.string()),
                                   pa.array(encoder.values(b), pa.binary()).cast(pa.string())],
                                  names=["key", "value"])

    return rows.mapInArrow(encode, "key string, value string")


_PRODUCERS: dict[tuple[int, str], Any] = {}
_PRODUCERS_LOCK = threading.Lock()


def _producer(kafka: Mapping[str, Any]) -> Any:
    """One producer per Python worker process and configuration (workers are reused)."""
    from confluent_kafka import Producer

    conf = producer_conf(kafka)
    key = (os.getpid(), json.dumps(conf, sort_keys=True, default=str))
    with _PRODUCERS_LOCK:
        p = _PRODUCERS.get(key)
        if p is None:
            p = _PRODUCERS[key] = Producer(logged(conf))
        return p


class _Delivery:
    def __init__(self, what: str) -> None:
        self.what = what
        self.errors: list[str] = []

    def __call__(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    def flush(self, producer: Any, timeout: float) -> None:
        left = producer.flush(timeout)
        if left or self.errors:
            raise RuntimeError(f"{self.what}: changelog write failed ({left} undelivered; "
                               f"{self.errors[:3]})")


def produce_rows(kafka: Mapping[str, Any], topic: str, encoder: RowEncoder,
                 batches: Iterable[pa.RecordBatch], timeout: float = 60.0) -> int:
    """Produce every row of ``batches`` to ``topic`` and flush; returns the row count."""
    p = _producer(kafka)
    produce, delivery, n = p.produce, _Delivery(f"topic {topic}"), 0
    for batch in batches:
        if not batch.num_rows:
            continue
        for k, v in zip(encoder.keys(batch), encoder.values(batch), strict=True):
            try:
                produce(topic, value=v, key=k, on_delivery=delivery)
            except BufferError:
                p.poll(0.05)
                produce(topic, value=v, key=k, on_delivery=delivery)
        n += batch.num_rows
    if n:
        delivery.flush(p, timeout)
    return n


def produce_markers(kafka: Mapping[str, Any], topic: str, partitions: int, batch_id: int,
                    checkpoint: str, timeout: float = 60.0) -> dict[str, dict[str, int]]:
    """One marker per partition naming the input offsets of ``batch_id`` (flushed)."""
    offsets = batch_offsets(checkpoint, batch_id)
    if offsets is None:
        raise RuntimeError(f"topic {topic}: no offset log entry for batch {batch_id} "
                           f"under {checkpoint}")
    marker = marker_value(batch_id, {t: {int(q): o for q, o in po.items()}
                                     for t, po in offsets.items()})
    p = _producer(kafka)
    delivery = _Delivery(f"topic {topic}")
    for part in range(partitions):
        p.produce(topic, value=marker, key=MARKER_KEY, partition=part,
                  headers=[(MARKER_HEADER, b"1")], on_delivery=delivery)
    delivery.flush(p, timeout)
    return offsets
