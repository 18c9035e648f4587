"""The source's probe outlives a metadata request Kafka does not answer in time: the
partitions named last time are read (a timed-out ListTopics under load stopped the
bank query in a CI run), and only a first request that fails raises."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from streamiq.pipeline.kafka_io import EndProbe
from streamiq.pipeline.options import parse_options

TIMED_OUT = KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed to get metadata"))


class Consumer:
    """list_topics as a broker answers it, or times out."""

    def __init__(self) -> None:
        self.fail = False
        self.partitions = [0, 1]

    def list_topics(self, timeout: float) -> Any:
        if self.fail:
            raise TIMED_OUT
        topic = SimpleNamespace(error=None, partitions={p: None for p in self.partitions})
        return SimpleNamespace(topics={"t": topic, "other": topic})


def probe() -> tuple[EndProbe, Consumer]:
    p = EndProbe(parse_options({"subscribe": "t", "kafka.bootstrap.servers": "x:1"},
                               streaming=True))
    c = Consumer()
    vars(p)["_consumer"] = c  # the probe asks this one
    return p, c


def test_an_unanswered_metadata_request_reads_the_partitions_known() -> None:
    p, c = probe()
    assert p.partitions() == [("t", 0), ("t", 1)]
    c.fail = True
    assert p.partitions() == [("t", 0), ("t", 1)] and p.metadata_timeouts == 1
    c.fail, c.partitions = False, [0, 1, 2]  # answered again: an added partition appears
    assert p.partitions() == [("t", 0), ("t", 1), ("t", 2)]


def test_a_first_request_that_fails_raises() -> None:
    p, c = probe()
    c.fail = True
    with pytest.raises(KafkaException):
        p.partitions()
