"""Producing dead letters: under the dead-letter topic's own size limit, never refused.

:class:`DeadLetterWriter` learns the topic's ``max.message.bytes`` (DescribeConfigs)
and sizes the producer and every dead letter (:mod:`~streamiq.pipeline.deadletter_record`)
below it. A dead letter the broker still refuses as too large (the topic's limit lowered
since) is sent again as its metadata alone, so one record can never make the write fail;
only an unreachable dead-letter topic does (the pipeline exits and its supervisor
restarts it, and the batch is scanned again: at-least-once).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from streamiq.kafka.clientlog import logged
from streamiq.pipeline.deadletter_record import DeadLetter

__all__ = ["DEFAULT_MAX_BYTES", "DeadLetterWriter", "RateLimitedLog"]

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


class DeadLetterWriter:
    """One idempotent producer to the dead-letter topic, sized to the topic's limit."""

    def __init__(self, kafka: Mapping[str, Any], topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.max_bytes = min(topic_max_bytes(kafka, topic), DEFAULT_MAX_BYTES)
        self._producer = Producer({**logged(kafka), "enable.idempotence": True, "linger.ms": 5,
                                   "message.max.bytes": self.max_bytes,
                                   "batch.size": self.max_bytes,
                                   "client.id": "streamiq-dead-letters"})

    def write(self, letters: Sequence[tuple[str, DeadLetter]]) -> None:
        """Produce ``(reason, letter)`` pairs and wait for all of them; raise when the
        topic cannot be written (not for a letter the broker finds too large)."""
        if not letters:
            return
        refused: list[DeadLetter] = []
        errors: list[str] = []
        for _, letter in letters:
            self._produce(letter, refused, errors)
        left = self._producer.flush(30)
        again: list[DeadLetter] = []
        for letter in refused:  # metadata only: far below any limit
            log.warning("dead letter refused as too large, sent without key and value: %s",
                        letter.value[:200])
            self._produce(_stub(letter), again, errors)
        left = self._producer.flush(30) if refused else left
        errors += [f"refused even without key and value: {a.value[:200]!r}" for a in again]
        if left or errors:
            raise RuntimeError(f"dead-letter write failed: {left} undelivered, {errors[:3]}")

    def _produce(self, letter: DeadLetter, refused: list[DeadLetter],
                 errors: list[str]) -> None:
        from confluent_kafka import KafkaError, KafkaException

        too_large = (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE,
                     KafkaError.INVALID_RECORD)

        def cb(err: Any, _msg: Any) -> None:
            if err is None:
                return
            (refused.append(letter) if err.code() in too_large else errors.append(str(err)))

        while True:
            try:
                self._producer.produce(self.topic, value=letter.value, key=letter.key,
                                       on_delivery=cb)
                return
            except BufferError:  # local queue full: let deliveries drain
                self._producer.poll(0.5)
            except KafkaException as exc:  # refused before sending (size)
                if exc.args[0].code() not in too_large:
                    raise
                refused.append(letter)
                return


def _stub(letter: DeadLetter) -> DeadLetter:
    """The letter's metadata alone (no key, no value; their original sizes kept)."""
    doc = json.loads(letter.value)
    doc.update(key=None, key_encoding=None, value=None, value_encoding=None, truncated=True)
    return DeadLetter(None, json.dumps(doc, ensure_ascii=False).encode("utf-8"), True)
