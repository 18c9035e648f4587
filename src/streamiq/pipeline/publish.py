"""Before a sink's first rows: its changelog topic exists and the catalog describes its view.

Runs on the driver (``streamiq.sink(...).start()``, or the data source's
``streamWriter``/``writer`` on the driver's Python planner worker), never on executors.
The catalog topic (compacted) is read to its end and the last record per view wins:
until Kafka's cleaner runs, older descriptions are still there.
A view already described compatibly is not published again, so restarts do not grow
the catalog; an incompatible description fails the sink naming the view and the
difference (:func:`streamiq.views.catalog.incompatibility`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streamiq.defaults import DEFAULT_PARTITIONS
from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.clientlog import logged
from streamiq.kafka.offsets import watermarks
from streamiq.pipeline.sink_options import SinkOptions
from streamiq.views.base import CHANGELOG_TOPIC_CONFIG
from streamiq.views.catalog import CATALOG_TOPIC_CONFIG, ViewSpec, incompatibility

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = ["changelog_partitions", "prepare", "read_catalog"]


_PREPARED: dict[tuple[str, str, bytes], ViewSpec] = {}  # per process: done already
_PARTITIONS: dict[tuple[str, str], int] = {}
_LOCK = threading.Lock()


def read_catalog(kafka: Mapping[str, Any], topic: str, timeout: float = 30.0
                 ) -> dict[str, ViewSpec]:
    """The last description per view on the catalog topic (records that are not one are
    skipped)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({**logged(kafka), "group.id": f"streamiq-sink-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    specs: dict[str, ViewSpec] = {}
    try:
        _, high = watermarks(c, topic, 0, timeout)
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout
        seen = 0  # next offset to read
        while seen < high:
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read the catalog {topic} to its end")
            for m in c.consume(500, 0.2):
                if m.error():
                    continue
                seen = (m.offset() or 0) + 1
                try:
                    spec = ViewSpec.from_json(m.value() or b"")
                except ValueError:
                    continue
                specs[spec.name] = spec
        return specs
    finally:
        c.close()


def changelog_partitions(opts: SinkOptions) -> int:
    """The changelog topic's partition count (created if missing), cached per process."""
    key = (opts.kafka.get("bootstrap.servers", ""), opts.changelog_topic)
    with _LOCK:
        if key in _PARTITIONS:
            return _PARTITIONS[key]
    n = ensure_topics(dict(opts.kafka),
                      {opts.changelog_topic: opts.partitions or DEFAULT_PARTITIONS},
                      config=CHANGELOG_TOPIC_CONFIG)
    with _LOCK:
        _PARTITIONS[key] = n[opts.changelog_topic]
    return n[opts.changelog_topic]


def _publish(kafka: Mapping[str, Any], topic: str, spec: ViewSpec) -> None:
    from confluent_kafka import Producer

    ensure_topics(dict(kafka), {topic: 1}, config=CATALOG_TOPIC_CONFIG)
    old = read_catalog(kafka, topic).get(spec.name)
    if old is not None:
        why = incompatibility(old, spec)
        if why is not None:
            raise ValueError(f"view {spec.name!r} is already in the catalog {topic} with a "
                             f"different description: {why}. Use another view name, or "
                             "delete the view's changelog and catalog record first")
        if old == spec:
            return
    p = Producer({**logged(kafka), "enable.idempotence": True, "acks": "all"})
    p.produce(topic, key=spec.name.encode(), value=spec.to_json())
    if p.flush(30):
        raise RuntimeError(f"view {spec.name!r}: could not publish to the catalog {topic}")


def prepare(opts: SinkOptions, schema: StructType) -> ViewSpec:
    """Create the changelog topic and publish the view's description (once per process
    for the same description). Raises ValueError when the catalog disagrees."""
    spec = ViewSpec.from_schema(schema, name=opts.view, key_columns=opts.key,
                                changelog_topic=opts.changelog_topic,
                                partitions=changelog_partitions(opts), window=opts.window,
                                is_global=opts.is_global, description=opts.description,
                                ticks=opts.ticks)
    memo = (opts.kafka.get("bootstrap.servers", ""), opts.catalog_topic, spec.to_json())
    with _LOCK:
        if memo in _PREPARED:
            return spec
    _publish(opts.kafka, opts.catalog_topic, spec)
    with _LOCK:
        _PREPARED[memo] = spec
    return spec
