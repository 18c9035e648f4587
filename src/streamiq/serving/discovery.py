"""Views found on the cluster's catalog topic, so a node serves them without user code.

Every pipeline's ``streamiq`` sink publishes its view's description (``ViewSpec``,
``views/catalog.py``) to ``_streamiq-<cluster>-catalog``, keyed by view name. A node
reads that topic from the beginning when it opens (``load``: every view published so
far exists before the node serves) and then follows it (a supervised thread): a new
view is added while the node runs, a compatible change (a value column added) replaces
the description, an incompatible one (key columns, windowing, changelog topic or
partitions changed, a column's type changed) is refused and reported, and the node
goes on serving the view as it was described before. The topic is compacted, and the
last record per key wins here (older ones stay until Kafka's cleaner runs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from streamiq.supervise import Supervisor
from streamiq.views.catalog import ViewSpec, incompatibility

__all__ = ["Discovery"]

log = logging.getLogger("streamiq.discovery")

#: serves a new or compatibly changed description; ValueError: refused (says why)
Serve = Callable[[ViewSpec], None]


class Discovery:
    """Follows the catalog topic: ``serve`` gets every new or compatibly changed view."""

    def __init__(self, kafka_conf: dict[str, Any], topic: str, serve: Serve,
                 supervisor: Supervisor) -> None:
        self._conf = kafka_conf
        self.topic = topic
        self._serve = serve
        self.specs: dict[str, ViewSpec] = {}  # what is served, per view
        self.refused: dict[str, str] = {}  # view -> why its newest description is refused
        self.skipped = 0  # records that are not a view description
        self._next = 0  # next catalog offset to read
        self._stop = threading.Event()
        self._thread = supervisor.thread("discovery", self._follow, self._stop)

    def load(self, timeout: float = 30.0) -> None:
        """Read the catalog to its end (blocking): the views published so far."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self._consumer_conf())
        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0),
                                                     timeout=timeout)
            consumer.assign([TopicPartition(self.topic, 0, self._next)])
            deadline = time.monotonic() + timeout
            while self._next < high and time.monotonic() < deadline:
                self._apply(consumer.consume(500, 0.2))
        finally:
            consumer.close()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _consumer_conf(self) -> dict[str, Any]:
        return {"group.id": "streamiq-discovery", "enable.auto.commit": False,
                "auto.offset.reset": "earliest", **self._conf}

    def _follow(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer(self._consumer_conf())
        try:
            consumer.assign([TopicPartition(self.topic, 0, self._next)])
            while not self._stop.is_set():
                self._apply(consumer.consume(100, 0.5))
        finally:
            consumer.close()

    def _apply(self, msgs: list[Any]) -> None:
        for m in msgs:
            if m.error():
                continue
            self._next = m.offset() + 1
            self.receive(m.value())

    def _refuse(self, name: str, why: str) -> None:
        if self.refused.get(name) != why:
            log.error("view %s: refused its description on the catalog (%s); serving it "
                      "as before, if at all", name, why)
        self.refused[name] = why

    def receive(self, raw: bytes | None) -> None:
        """Apply one catalog record: serve it, replace a description, or refuse it."""
        try:
            spec = ViewSpec.from_json(raw or b"")
        except ValueError as exc:
            self.skipped += 1
            log.warning("catalog %s: skipped a record that is not a view description (%s)",
                        self.topic, exc)
            return
        old = self.specs.get(spec.name)
        if old == spec:
            self.refused.pop(spec.name, None)
            return
        why = incompatibility(old, spec) if old is not None else None
        if why is not None:
            self._refuse(spec.name, why)
            return
        try:
            self._serve(spec)
        except ValueError as exc:
            self._refuse(spec.name, str(exc))
            return
        self.specs[spec.name] = spec
        self.refused.pop(spec.name, None)
        log.info("view %s: %s (changelog %s, %d partitions%s)", spec.name,
                 "serving" if old is None else "description updated", spec.changelog_topic,
                 spec.partitions, ", global" if spec.is_global else "")
