"""Warm the pipeline up before it says ready.

A cold pipeline's first micro-batch took 10-40 s on this 2-core machine: the JVM
compiles the plan's code, Spark starts the Python workers that run the source's
reads, and the state store classes load. A user who writes right after ``streamiq up``
says "all parts ready" waited all of that for the first answer. So, before the real
queries start, every view's own plan (source, parsing, validation, transform,
changelog columns) runs once over one example record in a private topic, with a
throwaway checkpoint and an output that is read and discarded. Python workers are
reused (``spark.python.worker.reuse``) and the JIT keeps what it compiled, so the real
queries' first batches run warm. The private topic and checkpoint are deleted after.

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

__all__ = ["example_record", "warm_up"]

log = logging.getLogger("streamiq.pipeline")

#: build(view, topics) -> the view's streaming frame over ``topics``
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


def _saw_input(q: StreamingQuery) -> bool:
    return any(p.get("numInputRows", 0) > 0 for p in q.recentProgress)


def warm_up(spark: SparkSession, views: list[View], kafka: Mapping[str, Any],
            build: Build, topic: str, partitions: int, timeout: float = 180.0,
            cancelled: Callable[[], bool] = lambda: False) -> float:
    """Run every view's plan once over its example record; returns the seconds taken.

    ``topic``: a private topic name (created, then deleted). Best effort: a warm-up that
    fails or times out is logged and the pipeline starts anyway (cold).
    """
    started = time.monotonic()
    ckpt = Path(tempfile.mkdtemp(prefix="streamiq-warmup-"))
    queries: list[StreamingQuery] = []
    try:
        ensure_topics(dict(kafka), {topic: partitions})
        _produce(kafka, topic, [example_record(v) for v in views])
        for v in views:
            q = (build(v, (topic,)).writeStream.queryName(f"warmup-{v.name}-{uuid.uuid4().hex[:6]}")
                 .outputMode("update").foreachBatch(lambda df, _id: df.toArrow())
                 .option("checkpointLocation", str(ckpt / v.name)).start())
            queries.append(q)
        deadline = started + timeout
        while not all(_saw_input(q) for q in queries) and not cancelled():
            failed = next((q for q in queries if not q.isActive), None)
            if failed is not None:
                raise RuntimeError(f"warm-up query stopped: {failed.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"warm-up did not finish in {timeout:.0f} s")
            time.sleep(0.05)
    except Exception as exc:
        log.warning("warm-up incomplete (the first micro-batch will be slower): %s", exc)
    finally:
        for q in queries:
            try:
                q.stop()
            except Exception as exc:  # stopping is best effort
                log.warning("warm-up: stop: %s", exc)
        _delete_topic(kafka, topic)
        shutil.rmtree(ckpt, ignore_errors=True)
    return time.monotonic() - started
