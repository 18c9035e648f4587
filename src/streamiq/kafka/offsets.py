"""Watermark reads that ride out a topic's first moments on a cluster.

A topic just created (``admin.ensure_topics``) is known to the controller at once and to
every broker a moment later; its partitions' leaders are elected after that. A client
whose metadata came from a broker that has not caught up yet gets ``_UNKNOWN_PARTITION``
(or ``UNKNOWN_TOPIC_OR_PART``, ``LEADER_NOT_AVAILABLE``) from ``get_watermark_offsets``
at once, instead of waiting: seen on a three-broker cluster as a node that died while it
opened. :func:`watermarks` retries those until its deadline. :func:`earliest_is_zero`
tells whether a topic still holds every record it was given (nothing deleted yet).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

__all__ = ["earliest_is_zero", "watermarks"]

#: errors that mean "not yet" on a topic or leader that is still being set up
_NOT_YET = frozenset({KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC,
                      KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.LEADER_NOT_AVAILABLE,
                      KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._TRANSPORT})


def watermarks(consumer: Any, topic: str, partition: int = 0,
               timeout: float = 30.0) -> tuple[int, int]:
    """``(low, high)`` of one partition, retrying "not yet" errors (above) with a short
    backoff until ``timeout``; then, or on any other error, the ``KafkaException``."""
    deadline = time.monotonic() + timeout
    pause = 0.05
    while True:
        left = deadline - time.monotonic()
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=max(left, 0.1))
            return int(low), int(high)
        except KafkaException as exc:
            err = exc.args[0]
            if not isinstance(err, KafkaError) or err.code() not in _NOT_YET \
                    or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def earliest_is_zero(kafka: Mapping[str, Any], topic: str, partitions: int,
                     timeout: float = 30.0) -> bool:
    """Every partition of ``topic`` still starts at offset 0: reading it from its start
    reads every record it was ever given."""
    from confluent_kafka import Consumer

    from streamiq.kafka.clientlog import logged

    c = Consumer({**logged(kafka), "group.id": f"streamiq-probe-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False})
    try:
        return all(watermarks(c, topic, p, timeout)[0] == 0 for p in range(partitions))
    finally:
        c.close()
