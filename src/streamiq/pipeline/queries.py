"""The pipeline's streaming queries, built: one per view, one per distinct input's dead letters.

A view's query: Spark's ``kafka`` source (earliest) -> ``from_json`` + validation
(:mod:`~streamiq.pipeline.deadletter`; invalid records kept out) -> the view's
``transform`` (with the input-position aggregates when it takes them:
:mod:`~streamiq.pipeline.positions`) -> its changelog records computed in Spark SQL
(:mod:`~streamiq.pipeline.changelog`) -> Spark's ``kafka`` sink, in update mode. No
Python runs per row, so the query runs in real-time mode as well as in micro-batch.

A dead-letter query (micro-batch, every 10 s): the same source and validation, the
invalid records as dead letters, to the dead-letter topic through the same sink.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streamiq.pipeline import positions
from streamiq.pipeline.changelog import changelog_columns, view_rows
from streamiq.pipeline.deadletter import dead_letter_stream, field_names, parse_input, valid_column
from streamiq.pipeline.java_kafka import source_options
from streamiq.pipeline.ticks import Ticks, is_tick, tick_header, tick_rows
from streamiq.views.base import View

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["DEAD_LETTER_TRIGGER", "MICRO_BATCH_SOURCE", "build_view_stream", "changelog_records",
           "sink_options", "start_dead_letters", "start_view", "view_frame"]

#: how often a dead-letter query looks for new input (dead letters need no milliseconds).
#: Its batches are the pipeline's dearest (planning alone 500-900 ms: the reasons' many
#: expressions are planned anew each batch): at 2 s the two of bank and orders ran back
#: to back (1.7-2.4 s a batch, under load), their threads 25 % of the driver JVM's CPU
#: samples against the three views' 16 %, taking cores from the views in either mode
#: (docs/design.md, "Micro-batch: where a batch's time went")
DEAD_LETTER_TRIGGER = "10 seconds"
#: a micro-batch's source: each batch's tasks seek the Java consumer to their offsets and
#: poll. At the client's default fetch wait (500 ms) a task of a one-record batch waited
#: ~140 ms for its records (9 ms of CPU in 150 ms of run time, from Spark's task metrics);
#: at 10 ms the read stage took 30 ms, a batch 200 ms less (docs/design.md, "Micro-batch:
#: where a batch's time went"). A real-time task polls without seeking: left at default
MICRO_BATCH_SOURCE = {"kafka.fetch.max.wait.ms": "10"}
Input = tuple[str, int]


def _source(spark: SparkSession, kafka: Mapping[str, Any], topics: Sequence[str],
            max_offsets_per_trigger: int | None = None, micro_batch: bool = False
            ) -> DataFrame:
    reader = (spark.readStream.format("kafka").options(**source_options(kafka))
              .option("subscribe", ",".join(topics)).option("startingOffsets", "earliest"))
    if micro_batch:
        reader = reader.options(**MICRO_BATCH_SOURCE)
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    return reader.load()


def view_frame(raw: DataFrame, view: View, inputs: Sequence[Input] = (),
               ticks: Ticks | None = None) -> DataFrame:
    """The view's rows over Kafka rows ``raw`` (a stream, or a batch frame of the kafka
    source's columns): its valid records, its transform, its columns, then the position
    columns when ``inputs`` is given and the transform takes them. ``ticks``: fold ticks
    into rows of these keys (``ticks.py``; with ``inputs``, for a view that
    :attr:`~streamiq.views.base.View.ticks_ok`), else ticks are dropped."""
    from pyspark.sql import functions as F

    parsed = parse_input(raw, view).withColumn("_streamiq_tick", is_tick())
    folding = ticks is not None and bool(ticks.keys) and bool(inputs) and view.ticks_ok
    keep = (valid_column(view) | F.col("_streamiq_tick")) if folding else (
        valid_column(view) & ~F.col("_streamiq_tick"))
    good = parsed.where(keep).select(
        *[F.col(f"`{n}`") for n in field_names(view)], "kafka_timestamp", "_streamiq_topic",
        "_streamiq_partition", "_streamiq_offset", *(["_streamiq_tick"] if folding else []))
    if folding:
        assert ticks is not None
        good = tick_rows(good, view, ticks.keys)
    if view.event_time:
        good = good.withColumn("event_time", F.timestamp_millis(F.col(view.event_time)))
    if inputs and view.takes_extra:
        out = view.transform(good, extra=positions.aggregates(inputs))
        return view_rows(out, view, positions.names(inputs))
    return view_rows(view.transform(good), view)


def build_view_stream(spark: SparkSession, view: View, kafka: Mapping[str, Any],
                      max_offsets_per_trigger: int | None = None,
                      topics: Sequence[str] | None = None,
                      inputs: Sequence[Input] = (), micro_batch: bool = False,
                      ticks: Ticks | None = None) -> DataFrame:
    """The view's streaming rows (:func:`view_frame`) from its input topics.

    ``topics``: the real input topic names (default ``view.source_topics``, unprefixed);
    ``micro_batch``: the source is read by micro-batches (:data:`MICRO_BATCH_SOURCE`).
    """
    raw = _source(spark, kafka, topics or view.source_topics, max_offsets_per_trigger,
                  micro_batch)
    return view_frame(raw, view, inputs, ticks)


def changelog_records(rows: DataFrame, view: View, inputs: Sequence[Input] = (),
                      ticks: Ticks | None = None) -> DataFrame:
    """:func:`build_view_stream`'s rows as changelog records (``key``, ``value`` and,
    with position columns, ``headers``; with ``ticks`` folded, their rows'
    :data:`~streamiq.views.base.TICK_HEADER` too)."""
    extra = positions.names(inputs) if inputs and positions.TS_COLUMN in rows.columns else []
    columns = [c for c in rows.columns if c not in extra]
    more = [tick_header(view, ticks.tasks)] if extra and ticks is not None else []
    return changelog_columns(rows, view.key_columns, columns,
                             positions.headers(inputs, more) if extra else None)


def sink_options(kafka: Mapping[str, Any], topic: str) -> dict[str, str]:
    """Spark's Kafka sink's options: the Java client's settings, the topic."""
    return {**source_options(kafka), "topic": topic}


def start_view(rows: DataFrame, view: View, inputs: Sequence[Input], kafka: Mapping[str, Any],
               topic: str, checkpoint: str, trigger: Mapping[str, str],
               ticks: Ticks | None = None) -> StreamingQuery:
    """Start the view's query (update mode) to its changelog ``topic``."""
    return (changelog_records(rows, view, inputs, ticks).writeStream.format("kafka")
            .options(**sink_options(kafka, topic)).queryName(view.name).outputMode("update")
            .option("checkpointLocation", checkpoint).trigger(**trigger).start())


def start_dead_letters(spark: SparkSession, view: View, kafka: Mapping[str, Any],
                       topics: Sequence[str], topic: str, max_bytes: int, checkpoint: str,
                       name: str) -> StreamingQuery:
    """Start the dead-letter query of ``view``'s input (append mode, micro-batch)."""
    letters = dead_letter_stream(_source(spark, kafka, topics, micro_batch=True), view,
                                 max_bytes)
    return (letters.writeStream.format("kafka").options(**sink_options(kafka, topic))
            .option("kafka.max.request.size", str(max_bytes)).queryName(name)
            .outputMode("append").option("checkpointLocation", checkpoint)
            .trigger(processingTime=DEAD_LETTER_TRIGGER).start())
