"""kafka/offsets.watermarks: "not yet" errors of a new topic are retried, others are not."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streamiq.kafka.offsets import watermarks


class Flaky:
    """A consumer whose ``get_watermark_offsets`` fails with ``errors`` first."""

    def __init__(self, *errors: int) -> None:
        self.errors = list(errors)
        self.asked: list[TopicPartition] = []

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> Any:
        self.asked.append(tp)
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 3, 17


def test_a_partition_no_broker_knows_yet_is_asked_again() -> None:
    consumer = Flaky(KafkaError._UNKNOWN_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert watermarks(consumer, "catalog", 0, timeout=10) == (3, 17)
    assert [(tp.topic, tp.partition) for tp in consumer.asked] == [("catalog", 0)] * 3


def test_other_errors_are_raised_at_once() -> None:
    consumer = Flaky(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    with pytest.raises(KafkaException) as raised:
        watermarks(consumer, "catalog", 0, timeout=10)
    assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert len(consumer.asked) == 1


def test_not_yet_past_the_deadline_is_raised() -> None:
    consumer = Flaky(*[KafkaError._UNKNOWN_PARTITION] * 1000)
    with pytest.raises(KafkaException) as raised:
        watermarks(consumer, "catalog", 0, timeout=0.3)
    assert raised.value.args[0].code() == KafkaError._UNKNOWN_PARTITION
    assert 1 < len(consumer.asked) < 1000
