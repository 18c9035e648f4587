"""Warm the pipeline up before it says ready.

A cold pipeline's first micro-batch took 10-40 s on this 2-core machine: the JVM
compiles the plan's code, and the state store classes load. A user who writes right
after ``streamiq up`` says "all parts ready" waited all of that for the first answer.
So, before the real queries start, every view's own plan (source, parsing, validation,
transform, changelog records) runs once over one example record in a private topic,
with a throwaway checkpoint, and writes its record through Spark's Kafka sink to a
private output topic. The JIT keeps what it compiled, and Spark keeps the sink's Kafka
producer (its pool is keyed by the producer's settings, the same for the real
queries): the real queries' first records run warm, in either mode, without paying the
producer's connection and idempotence handshake. The private topics and checkpoint are
deleted after.

Nothing of the warm-up reaches a changelog, the dead-letter topic or a checkpoint the
real queries use.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamiq.kafka.admin import delete_topics, ensure_topics
from streamiq.kafka.clientlog import logged
from streamiq.views.base import View

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

__all__ = ["example_record", "plan_builder", "warm_up"]

log = logging.getLogger("streamiq.pipeline")

#: build(view, topics) -> the view's changelog records over ``topics`` (key, value,...)
Build = Callable[[View, tuple[str, ...]], "DataFrame"]

_EXAMPLE_VALUES: dict[str, Any] = {"string": "warmup", "boolean": False, "double": 0.0,
                                   "float": 0.0}


def example_record(view: View) -> dict[str, Any]:
    """``view.example``, or one made from ``value_schema`` (text, zero, false)."""
    if view.example is not None:
        return dict(view.example)
    from pyspark.sql.types import StructType, _parse_datatype_string

    schema = _parse_datatype_string(view.value_schema)
    assert isinstance(schema, StructType)
    return {f.name: _EXAMPLE_VALUES.get(f.dataType.typeName(), 0) for f in schema.fields}


def _produce(kafka: Mapping[str, Any], topic: str, records: list[dict[str, Any]]) -> None:
    from confluent_kafka import Producer

    producer = Producer(logged(kafka))
    for rec in records:
        producer.produce(topic, key=b"warmup", value=json.dumps(rec).encode())
    if producer.flush(30):
        raise RuntimeError(f"warm-up records were not delivered to {topic}")


def _delete_topic(kafka: Mapping[str, Any], topic: str) -> None:
    try:
        delete_topics(dict(kafka), [topic])
    except Exception as exc:  # an undeleted warm-up topic is litter, not an error
        log.warning("warm-up: could not delete topic %s: %r", topic, exc)


def _written(kafka: Mapping[str, Any], topic: str, partitions: int) -> int:
    """Records on ``topic`` (the sum of its partitions' high watermarks)."""
    from confluent_kafka import Consumer

    from streamiq.kafka.offsets import watermarks

    c = Consumer({**logged(kafka), "group.id": f"streamiq-warmup-{uuid.uuid4().hex[:8]}"})
    try:
        return sum(watermarks(c, topic, p, 10.0)[1] for p in range(partitions))
    finally:
        c.close()


def plan_builder(spark: SparkSession, kafka: Mapping[str, Any], micro_batch: bool) -> Build:
    """What :func:`warm_up` runs of a view: the pipeline's own plan (``queries.py``), its
    changelog records, positions over the private topic's first partition."""
    from streamiq.pipeline.queries import build_view_stream, changelog_records

    def build(view: View, topics: tuple[str, ...]) -> DataFrame:
        inputs = [(t, 0) for t in topics] if view.takes_extra else []
        rows = build_view_stream(spark, view, kafka, None, topics, inputs, micro_batch)
        return changelog_records(rows, view, inputs)

    return build


def warm_up(spark: SparkSession, views: list[View], kafka: Mapping[str, Any],
            build: Build, topic: str, partitions: int, timeout: float = 180.0,
            cancelled: Callable[[], bool] = lambda: False,
            trigger: Mapping[str, str] | None = None) -> float:
    """Run every view's plan once over its example record; returns the seconds taken.

    ``topic``: a private topic name (created, then deleted, with ``<topic>-out``);
    ``trigger``: the queries' (the real ones', so that the same operators run warm: a
    real-time query's are not a micro-batch's). Best effort: a warm-up that fails or
    times out is logged and the pipeline starts anyway (cold).
    """
    from streamiq.pipeline.queries import sink_options
    from streamiq.pipeline.session import quiet
    from streamiq.pipeline.stopnoise import stop_noise

    started = time.monotonic()
    ckpt = Path(tempfile.mkdtemp(prefix="streamiq-warmup-"))
    queries: list[StreamingQuery] = []
    out = f"{topic}-out"
    try:
        ensure_topics(dict(kafka), {topic: partitions, out: partitions})
        _produce(kafka, topic, [example_record(v) for v in views])
        for v in views:
            w = (build(v, (topic,)).writeStream.format("kafka")
                 .options(**sink_options(kafka, out))
                 .queryName(f"warmup-{v.name}-{uuid.uuid4().hex[:6]}").outputMode("update")
                 .option("checkpointLocation", str(ckpt / v.name)))
            queries.append((w.trigger(**trigger) if trigger else w).start())
        deadline = started + timeout
        while _written(kafka, out, partitions) < len(views) and not cancelled():
            failed = next((q for q in queries if not q.isActive), None)
            if failed is not None:
                raise RuntimeError(f"warm-up query stopped: {failed.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"warm-up did not finish in {timeout:.0f} s")
            time.sleep(0.05)
    except Exception as exc:
        log.warning("warm-up incomplete (the first micro-batch will be slower): %s", exc)
    finally:
        # a real-time query's stop: Spark logs its tasks' aborts, and its shuffle readers'
        # "fatal error"s come later, from Spark's threads (pipeline/stopnoise.py): dropped
        # until the pipeline disarms the filter, once its own queries run
        stop_noise(spark).arm()
        with quiet(spark):
            for q in queries:
                try:
                    q.stop()
                except Exception as exc:  # stopping is best effort
                    log.warning("warm-up: stop: %s", exc)
        _delete_topic(kafka, topic)
        _delete_topic(kafka, out)
        shutil.rmtree(ckpt, ignore_errors=True)
    return time.monotonic() - started
