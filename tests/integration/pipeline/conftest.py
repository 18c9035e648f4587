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
