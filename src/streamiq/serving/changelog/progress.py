"""The pipeline's progress as it publishes it (``pipeline/progress.py``), for the
dashboard: a supervised thread follows ``_streamiq-<cluster>-progress`` from its last
records and keeps the newest per view. A record that is not a progress (not one JSON
object of at most ``_MAX_RECORD`` bytes naming a view by a valid name), or names a new
view beyond ``_MAX_VIEWS``, is skipped and counted per reason (``skips``)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.offsets import watermarks
from streamiq.kafka.skips import Skip, Skips, load_object
from streamiq.supervise import Supervisor
from streamiq.views.catalog import PROGRESS_TOPIC_CONFIG, VIEW_NAME

__all__ = ["Progress"]

log = logging.getLogger("streamiq.node")

_BACKLOG = 100  # records read back from the end when the node starts
_MAX_RECORD = 4096
_MAX_VIEWS = 1024  # views whose progress is kept


class Progress:
    def __init__(self, kafka_conf: dict[str, Any], topic: str, supervisor: Supervisor) -> None:
        self._conf = kafka_conf
        self.topic = topic
        self.latest: dict[str, dict[str, Any]] = {}  # view -> its newest progress
        self.skips = Skips(log, "progress record")  # records not used, per reason
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

    @property
    def skipped(self) -> int:
        return self.skips.total

    def receive(self, raw: bytes | None) -> None:
        try:
            doc = load_object(raw, _MAX_RECORD)
            view = doc.get("view")
            if not isinstance(view, str) or not VIEW_NAME.match(view):
                raise Skip("bad_view", f"view {str(view)[:40]!r} is not a view name")
            if view not in self.latest and len(self.latest) >= _MAX_VIEWS:
                raise Skip("too_many_views", f"more than {_MAX_VIEWS} views")
        except Skip as exc:
            self.skips.skip(exc.reason, str(exc))
            return
        except Exception as exc:  # a record no check foresaw: still never fatal
            self.skips.skip("undecodable", repr(exc))
            return
        self.latest[view] = doc

    def _follow(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        # the pipeline may not have run yet
        ensure_topics(self._conf, {self.topic: 1}, config=PROGRESS_TOPIC_CONFIG)
        consumer = Consumer({"group.id": "streamiq-progress", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", **self._conf})
        try:
            low, high = watermarks(consumer, self.topic, 0, timeout=10)
            consumer.assign([TopicPartition(self.topic, 0, max(low, high - _BACKLOG))])
            while not self._stop.is_set():
                for m in consumer.consume(100, 0.5):
                    if not m.error():
                        self.receive(m.value())
        finally:
            consumer.close()
