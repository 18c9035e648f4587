"""Dead letters' size limit and log: the topic's own limit, one line per interval.

:func:`topic_max_bytes` learns the dead-letter topic's ``max.message.bytes``
(DescribeConfigs) when the pipeline starts; every dead letter is sized below it
(:mod:`~streamiq.pipeline.deadletter_record`) and the sink's producer may send up to it
(``max.request.size``), so no record can make the write fail. (A limit lowered on the
topic while the pipeline runs is only learnt at its next start.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["DEFAULT_MAX_BYTES", "RateLimitedLog", "topic_max_bytes"]

log = logging.getLogger(__name__)

#: used when the topic's limit cannot be read: librdkafka's default message.max.bytes,
#: below Kafka's default max.message.bytes (1048588)
DEFAULT_MAX_BYTES = 1_000_000


class RateLimitedLog:
    """``warn`` logs at most one line per ``interval`` seconds; the lines it held back
    are counted and named in the next one it logs."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0) -> None:
        self.logger = logger
        self.interval = interval
        self.held = 0
        self._last = float("-inf")

    def warn(self, msg: str, *args: Any) -> bool:
        now = time.monotonic()
        if now - self._last < self.interval:
            self.held += 1
            return False
        if self.held:
            msg += f" (and {self.held} more since the last such line)"
        self.held, self._last = 0, now
        self.logger.warning(msg, *args)
        return True


def topic_max_bytes(kafka: Mapping[str, Any], topic: str, timeout: float = 10.0) -> int:
    """The topic's ``max.message.bytes`` (``DEFAULT_MAX_BYTES`` when unknown)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({k: v for k, v in kafka.items()})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        entries = admin.describe_configs([res], request_timeout=timeout)[res].result(timeout)
        return int(entries["max.message.bytes"].value)
    except (KafkaException, KeyError, ValueError, TypeError) as exc:
        log.warning("dead letters: max.message.bytes of %s unknown (%s): assuming %d",
                    topic, exc, DEFAULT_MAX_BYTES)
        return DEFAULT_MAX_BYTES
