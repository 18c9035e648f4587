"""The pipeline's progress, published for the nodes' dashboards.

After a micro-batch that read input, the driver sends one small JSON record per view
(batches, input records, dead letters, last batch duration, input and processing rate)
to ``_streamiq-<cluster>-progress``, keyed by view, at most every ``PERIOD_S`` per view:
a pipeline busy for days adds a few records a minute, not one per batch. Publishing is
best effort: a record the broker does not take is dropped, never a failed batch.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from streamiq.kafka.admin import ensure_topics
from streamiq.views.catalog import PROGRESS_TOPIC_CONFIG

__all__ = ["PERIOD_S", "ProgressPublisher"]

log = logging.getLogger("streamiq.pipeline")

PERIOD_S = 5.0


class ProgressPublisher:
    def __init__(self, kafka: Mapping[str, Any], topic: str) -> None:
        self.kafka = dict(kafka)
        self.topic = topic
        self._producer: Any = None
        self._sent: dict[str, float] = {}  # view -> when its progress was last sent

    def publish(self, view: str, doc: dict[str, Any], force: bool = False) -> bool:
        """Send ``doc`` unless this view's was sent less than ``PERIOD_S`` ago."""
        now = time.monotonic()
        if not force and now - self._sent.get(view, -PERIOD_S) < PERIOD_S:
            return False
        try:
            if self._producer is None:
                from confluent_kafka import Producer

                ensure_topics(self.kafka, {self.topic: 1}, config=PROGRESS_TOPIC_CONFIG)
                self._producer = Producer({**self.kafka, "linger.ms": 5})
            self._producer.produce(self.topic, key=view.encode(), value=json.dumps(
                {"view": view, "at": time.time(), **doc}).encode())
            self._producer.poll(0)
        except Exception as exc:  # the dashboards miss one update; the pipeline goes on
            log.warning("progress of %s not published: %r", view, exc)
            return False
        self._sent[view] = now
        return True

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5)
