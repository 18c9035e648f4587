"""The pipeline's progress, published for the nodes' dashboards.

After a micro-batch that read input, the driver sends one small JSON record per view
(batches, input records, dead letters, last batch duration, input and processing rate)
to ``_streamiq-<cluster>-progress``, keyed by view, at most every ``PERIOD_S`` per view:
a pipeline busy for days adds a few records a minute, not one per batch. A progress
held back by that limit is sent when the period ends (the newest one only), so a
pipeline that goes quiet still shows its last batch. Publishing is best effort: a
record the broker does not take is dropped, never a failed batch.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.clientlog import logged
from streamiq.views.catalog import PROGRESS_TOPIC_CONFIG

__all__ = ["PERIOD_S", "ProgressPublisher"]

log = logging.getLogger("streamiq.pipeline")

PERIOD_S = 5.0

Later = Callable[[float, Callable[[], None]], None]


def _timer(delay: float, run: Callable[[], None]) -> None:
    t = threading.Timer(delay, run)
    t.daemon = True
    t.start()


class ProgressPublisher:
    def __init__(self, kafka: Mapping[str, Any], topic: str, later: Later = _timer) -> None:
        self.kafka = dict(kafka)
        self.topic = topic
        self._later = later  # runs a function after a delay (a timer thread)
        self._producer: Any = None
        self._lock = threading.Lock()
        self._sent: dict[str, float] = {}  # view -> when its progress was last sent
        self._held: dict[str, dict[str, Any]] = {}  # view -> its newest unsent progress
        self._closed = False

    def publish(self, view: str, doc: dict[str, Any], force: bool = False) -> bool:
        """Send ``doc`` unless this view's was sent less than ``PERIOD_S`` ago; then hold
        it, to be sent when the period ends unless a newer one comes first."""
        with self._lock:
            wait = PERIOD_S - (time.monotonic() - self._sent.get(view, -PERIOD_S))
            if not force and wait > 0:
                first = view not in self._held
                self._held[view] = doc
                if first:
                    self._later(wait, lambda: self._send_held(view))
                return False
            self._held.pop(view, None)
            return self._send(view, doc)

    def _send_held(self, view: str) -> None:
        with self._lock:
            doc = self._held.pop(view, None)
            if doc is not None and not self._closed:
                self._send(view, doc)

    def _send(self, view: str, doc: dict[str, Any]) -> bool:
        try:
            if self._producer is None:
                from confluent_kafka import Producer

                ensure_topics(self.kafka, {self.topic: 1}, config=PROGRESS_TOPIC_CONFIG)
                self._producer = Producer({**logged(self.kafka), "linger.ms": 5})
            self._producer.produce(self.topic, key=view.encode(), value=json.dumps(
                {"view": view, "at": time.time(), **doc}).encode())
            self._producer.poll(0)
        except Exception as exc:  # the dashboards miss one update; the pipeline goes on
            log.warning("progress of %s not published: %r", view, exc)
            return False
        self._sent[view] = time.monotonic()
        return True

    def close(self) -> None:
        """Send what is held, then wait (a while) for the broker to take it."""
        with self._lock:
            if self._producer is not None:  # else the broker never took one: no waiting
                for view, doc in list(self._held.items()):
                    self._send(view, doc)
            self._held.clear()
            self._closed = True
        if self._producer is not None:
            self._producer.flush(5)
