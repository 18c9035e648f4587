"""The pipeline's progress as it publishes it (``pipeline/progress.py``), for the
dashboard: a supervised thread follows ``_streamiq-<cluster>-progress`` from its last
records and keeps the newest per view. Records that do not parse are skipped and
counted."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from streamiq.kafka.admin import ensure_topics
from streamiq.supervise import Supervisor
from streamiq.views.catalog import PROGRESS_TOPIC_CONFIG

__all__ = ["Progress"]

log = logging.getLogger("streamiq.node")

_BACKLOG = 100  # records read back from the end when the node starts
_MAX_RECORD = 4096


class Progress:
    def __init__(self, kafka_conf: dict[str, Any], topic: str, supervisor: Supervisor) -> None:
        self._conf = kafka_conf
        self.topic = topic
        self.latest: dict[str, dict[str, Any]] = {}  # view -> its newest progress
        self.skipped = 0
        self._stop = threading.Event()
        self._thread = supervisor.thread("progress", self._follow, self._stop)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def snapshot(self) -> dict[str, dict[str, Any]]:
        return dict(self.latest)

    def receive(self, raw: bytes | None) -> None:
        try:
            if raw is None or len(raw) > _MAX_RECORD:
                raise ValueError("empty or oversized")
            doc = json.loads(raw)
            if not isinstance(doc, dict) or not isinstance(doc.get("view"), str):
                raise ValueError("not a progress record")
        except (ValueError, RecursionError):
            self.skipped += 1
            return
        self.latest[doc["view"]] = doc

    def _follow(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        # the pipeline may not have run yet
        ensure_topics(self._conf, {self.topic: 1}, config=PROGRESS_TOPIC_CONFIG)
        consumer = Consumer({"group.id": "streamiq-progress", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", **self._conf})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(self.topic, 0),
                                                       timeout=10)
            consumer.assign([TopicPartition(self.topic, 0, max(low, high - _BACKLOG))])
            while not self._stop.is_set():
                for m in consumer.consume(100, 0.5):
                    if not m.error():
                        self.receive(m.value())
        finally:
            consumer.close()
