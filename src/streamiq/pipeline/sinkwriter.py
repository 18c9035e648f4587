"""``streamiq.sink(df)``: write any keyed streaming frame to a view, checked at ``start()``.

::

    import streamiq
    (streamiq.sink(counts)                        # instead of counts.writeStream...
       .option("view", "page_views")
       .option("key", "user_id")
       .option("kafka.bootstrap.servers", "127.0.0.1:9092")
       .outputMode("update")
       .option("checkpointLocation", "/ck/page_views")
       .start())

:meth:`SinkWriter.start` validates on the driver first (each error names the option;
docs/sink.md): options, output mode, key columns against the frame's schema, Spark's
Kafka connector on the session, the changelog topic, and the catalog (an incompatible
description of the view raises, naming the view and the difference). Then it starts
the query: the frame's rows as changelog records computed in Spark SQL
(:mod:`~streamiq.pipeline.changelog`), written by Spark's own Kafka sink, so the
session needs no Python worker. After each batch the driver writes the batch's markers
(:mod:`~streamiq.pipeline.markers`, from a listener on the session).

Without a ``trigger`` the query runs in real-time mode when Spark allows it, else in
micro-batch, saying why in one line (an operator not on real-time mode's allowlist,
too few task slots); a checkpoint keeps the mode it was made in (``streamiq.json`` beside
Spark's files).
"""

from __future__ import annotations

import json
import logging
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from streamiq.pipeline import modes
from streamiq.pipeline.changelog import changelog_columns
from streamiq.pipeline.markers import Markers
from streamiq.pipeline.publish import prepare
from streamiq.pipeline.queries import sink_options
from streamiq.pipeline.sink_options import check_output_mode, parse_sink_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["DEFAULT_REAL_TIME_BATCH", "SinkWriter", "sink"]

log = logging.getLogger("streamiq.sink")

#: a user's real-time query's batch length (``--realtime-batch-s``'s default)
DEFAULT_REAL_TIME_BATCH = "300 seconds"
_KAFKA_FORMAT = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
_MARK = "streamiq.json"


class _MarkerListener:
    """One per session: writes the markers of every streamiq sink query after each of its
    batches that read input (from Spark's listener thread)."""

    _lock = threading.Lock()
    _by_session: dict[int, _MarkerListener] = {}

    def __init__(self) -> None:
        self.queries: dict[str, Markers] = {}  # query id -> its markers

    @classmethod
    def of(cls, spark: SparkSession) -> _MarkerListener:
        from pyspark.sql.streaming import StreamingQueryListener

        with cls._lock:
            found = cls._by_session.get(id(spark))
            if found is not None:
                return found
            found = cls._by_session[id(spark)] = cls()
        markers = found.queries

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                p = event.progress
                m = markers.get(str(p.id))
                if m is None or p.numInputRows == 0:
                    return
                try:
                    m.batch(p.batchId)
                except Exception as exc:  # the next batch's marker makes up for it
                    log.warning("view changelog %s: %s", m.topic, exc)

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                gone = markers.pop(str(event.id), None)
                if gone is not None:
                    gone.close()

        spark.streams.addListener(_Listener())
        return found


def _local(checkpoint: str) -> Path | None:
    parsed = urlparse(checkpoint)
    return Path(parsed.path if parsed.scheme else checkpoint) \
        if parsed.scheme in ("", "file") else None


def _recorded_mode(checkpoint: str) -> str | None:
    """The mode a (local) checkpoint was made in: recorded, micro-batch if Spark made it
    before the record existed, None for a new one."""
    path = _local(checkpoint)
    if path is None:
        return None
    if (path / _MARK).is_file():
        return str(json.loads((path / _MARK).read_text()).get("trigger"))
    spark_made = (path / "offsets").is_dir() and any((path / "offsets").iterdir())
    return modes.MICRO_BATCH if spark_made else None


def _record_mode(checkpoint: str, mode: str) -> None:
    path = _local(checkpoint)
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        (path / _MARK).write_text(json.dumps({"trigger": mode, "inputs": []}) + "\n")


class SinkWriter:
    """``df.writeStream``'s builder methods for the streamiq sink; ``start()`` validates."""

    def __init__(self, df: DataFrame) -> None:
        self._df = df
        self._options: dict[str, str] = {}
        self._mode = "update"
        self._trigger: dict[str, Any] = {}
        self._name: str | None = None

    def option(self, key: str, value: Any) -> SinkWriter:
        self._options[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return self

    def options(self, **options: Any) -> SinkWriter:
        for k, v in options.items():
            self.option(k, v)
        return self

    def outputMode(self, mode: str) -> SinkWriter:
        self._mode = mode
        return self

    def trigger(self, **trigger: Any) -> SinkWriter:
        self._trigger = trigger
        return self

    def queryName(self, name: str) -> SinkWriter:
        self._name = name
        return self

    def start(self) -> StreamingQuery:
        """Validate everything on the driver (ValueError naming the option), create the
        changelog topic, publish the view to the catalog, then start the query."""
        if not self._df.isStreaming:
            raise ValueError("streamiq.sink needs a streaming DataFrame (spark.readStream)")
        mode = check_output_mode(self._mode)
        opts = parse_sink_options(self._options, self._df.schema)
        if opts.checkpoint is None:
            raise ValueError("option 'checkpointLocation' must be specified (the markers' "
                             "input offsets are read from the query's offset log)")
        spark = self._df.sparkSession
        _require_kafka_format(spark)
        spec = prepare(opts, self._df.schema)
        records = changelog_columns(self._df, opts.key)
        w = (records.writeStream.format("kafka")
             .options(**sink_options(opts.kafka, opts.changelog_topic))
             .outputMode(mode).option("checkpointLocation", opts.checkpoint))
        if self._name:
            w = w.queryName(self._name)
        listener = _MarkerListener.of(spark)
        query = self._start(spark, w, opts.checkpoint)
        listener.queries[str(query.id)] = Markers(opts.kafka, opts.changelog_topic,
                                                  spec.partitions, opts.checkpoint)
        return query

    def _start(self, spark: SparkSession, w: Any, checkpoint: str) -> StreamingQuery:
        """The query in the trigger asked, or the checkpoint's mode, or real-time mode
        when Spark runs the query so and micro-batch otherwise (one line why)."""
        recorded = _recorded_mode(checkpoint)
        if self._trigger:
            asked = modes.REAL_TIME if "realTime" in self._trigger else modes.MICRO_BATCH
            if recorded not in (None, asked):
                raise ValueError(f"checkpointLocation {checkpoint} was made in {recorded} "
                                 f"mode; {asked} mode needs a fresh checkpoint")
            query = _with_conf(spark, asked, lambda: w.trigger(**self._trigger).start())
            _record_mode(checkpoint, asked)
            return query
        if recorded == modes.MICRO_BATCH:
            started: StreamingQuery = w.start()
            return started
        try:  # some refusals come at once (the output mode), the others on the first batch
            query = _with_conf(spark, modes.REAL_TIME,
                               lambda: w.trigger(realTime=DEFAULT_REAL_TIME_BATCH).start())
        except Exception as exc:
            why = modes.refusal(exc)
            if why is None:
                raise
        else:
            why = _refused(spark, query)
            if why is None:
                _record_mode(checkpoint, modes.REAL_TIME)
                return query
        if recorded == modes.REAL_TIME:
            raise RuntimeError(f"checkpointLocation {checkpoint} was made in real-time mode, "
                               f"which now refuses the query: {why}")
        log.warning("streamiq.sink: %s; the query runs in micro-batch mode", why)
        path = _local(checkpoint)
        if path is not None:  # the refused attempt's files (no batch ran): a fresh start
            for part in ("offsets", "commits", "sources", "state", "metadata",
                         ".metadata.crc"):
                target = path / part
                if target.is_dir():
                    shutil.rmtree(target, ignore_errors=True)
                else:
                    target.unlink(missing_ok=True)
        fallback: StreamingQuery = w.trigger(processingTime="0 seconds").start()
        _record_mode(checkpoint, modes.MICRO_BATCH)
        return fallback


def _with_conf(spark: SparkSession, mode: str, start: Any) -> StreamingQuery:
    """``start()`` with real-time mode's SQL settings in the session (a query takes
    the session's settings when it starts; the user's are put back after)."""
    if mode != modes.REAL_TIME:
        q: StreamingQuery = start()
        return q
    old = {k: spark.conf.get(k, None) for k in modes.REAL_TIME_SQL}
    for k, want in modes.REAL_TIME_SQL.items():
        spark.conf.set(k, want)
    try:
        q = start()
    finally:
        for k, was in old.items():
            if was is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, was)
    return q


def _refused(spark: SparkSession, query: StreamingQuery, timeout: float = 120.0) -> str | None:
    """Wait until the real-time query runs (None) or stops: why real-time mode refused
    it; any other failure is raised, at once."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not query.isActive or query.exception() is not None:
            exc = query.exception()
            why: str | None = modes.refusal(exc)
            if why is None:
                raise RuntimeError(f"the streamiq sink's query failed: {exc}")
            query.stop()
            return why
        if modes.running(spark, query):
            return None
        time.sleep(0.05)
    return None


def _require_kafka_format(spark: SparkSession) -> None:
    """ValueError naming the fix when Spark's Kafka connector is not on the session."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    if not jvm.org.apache.spark.util.Utils.classIsLoadable(_KAFKA_FORMAT):
        raise ValueError("Spark's Kafka connector is not on this session's classpath: build "
                         "it with .config('spark.jars', ','.join(streamiq.pipeline.connector"
                         ".require_connector())) (streamiq install resolves the jars)")


def sink(df: DataFrame) -> SinkWriter:
    """The streamiq sink's writer for a streaming frame (see the module's example)."""
    return SinkWriter(df)
