"""Helpers for the pipeline integration tests."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import pytest


@pytest.fixture
def produce(bootstrap: str) -> Callable[..., None]:
    """produce(topic, values, partition=None, keys=None, headers=None, linger_ms=50)."""
    from confluent_kafka import Producer

    def run(topic: str, values: Iterable[Any], partition: int | None = None,
            keys: Iterable[Any] | None = None, headers: list[tuple[str, bytes]] | None = None,
            linger_ms: int = 50) -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms,
                      "partitioner": "murmur2_random"})
        vals = list(values)
        ks = list(keys) if keys is not None else [None] * len(vals)
        for k, v in zip(ks, vals, strict=True):
            if isinstance(v, dict):
                v = json.dumps(v)
            kw: dict[str, Any] = {"key": k, "value": v}
            if partition is not None:
                kw["partition"] = partition
            if headers:
                kw["headers"] = headers
            p.produce(topic, **kw)
        assert p.flush(15) == 0

    return run


def read_topic(bootstrap: str, topic: str, timeout: float = 15.0) -> list[Any]:
    """Every record of ``topic`` (up to its high watermark), in partition/offset order."""
    import time

    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "streamiq-test-read",
                  "enable.partition.eof": True, "fetch.wait.max.ms": 20})
    try:
        md = c.list_topics(topic, timeout=10)
        parts = sorted(md.topics[topic].partitions)
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        done: set[int] = set()
        out: list[Any] = []
        deadline = time.monotonic() + timeout
        while len(done) < len(parts) and time.monotonic() < deadline:
            for m in c.consume(1000, timeout=0.2):
                if m.error():
                    done.add(m.partition())
                else:
                    out.append(m)
        assert len(done) == len(parts), f"could not read {topic} to its end"
        return sorted(out, key=lambda m: (m.partition(), m.offset()))
    finally:
        c.close()
