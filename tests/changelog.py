"""Write view rows straight to a changelog topic, following the changelog contract."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from confluent_kafka import Producer

from streamiq.views.base import TIME_HEADER, View

__all__ = ["produce_rows"]


def produce_rows(bootstrap: str, topic: str, view: View, rows: Iterable[dict[str, Any]],
                 written_ms: int | None = None) -> int:
    """Produce rows keyed by the view key with Kafka's default partitioner; return count.
    ``written_ms``: each row's input time (the pipeline's ``streamiq-ts`` header)."""
    headers: list[tuple[str, str | bytes | None]] | None = (
        None if written_ms is None else [(TIME_HEADER, str(written_ms).encode())])
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                  "linger.ms": 20, "enable.idempotence": True})
    n = 0
    for row in rows:
        key, value = view.key_of(row).encode(), json.dumps(row).encode()
        while True:
            try:
                p.produce(topic, key=key, value=value, headers=headers)
                break
            except BufferError:  # the local queue is full (a slow broker): let it drain
                p.poll(0.5)
        n += 1
        if n % 10_000 == 0:
            p.poll(0)
    assert p.flush(60) == 0
    return n
