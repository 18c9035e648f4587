"""Records anyone with write access could put on the topics a node reads, and polls of
what the nodes make of them (tests of issue 28: no poison pill)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from confluent_kafka import KafkaError, Message, Producer
from procs import HTTP

__all__ = ["JUNK", "health", "members", "produce", "reasons", "until"]

#: not JSON, nested past any recursive parser, binary, ~1 MB, digits past int()'s limit
JUNK: list[bytes] = [
    b"[" * 200_000,
    b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    bytes(range(256)) * 4,
    b"[" * 1_000_000,
    json.dumps({"endpoint": "127.0.0.1:1", "incarnation": "x", "view": "v",
                "partitions": {"v": {"9" * 5000: {}}}}).encode(),
    b"null",
]


def produce(bootstrap: str, topic: str, values: Iterable[bytes], key: bytes = b"junk",
            headers: Callable[[bytes], Any] | None = None) -> None:
    """Produce every value (``headers(value)``: the record's headers) and wait for all."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                  "message.max.bytes": 2_000_000})
    failed: list[KafkaError] = []

    def delivered(err: KafkaError | None, _m: Message) -> None:
        if err is not None:
            failed.append(err)

    for v in values:
        p.produce(topic, key=key, value=v, headers=headers(v) if headers else None,
                  on_delivery=delivered)
    assert p.flush(30) == 0 and failed == [], failed


def health(port: int) -> dict[str, Any]:
    doc: dict[str, Any] = HTTP.get(f"http://127.0.0.1:{port}/health", timeout=10).json()
    return doc  # a 503 body carries the same fields


def reasons(port: int, topic: str) -> dict[str, int]:
    """Records of ``topic`` (membership, catalog, progress) the node skipped, per reason."""
    out: dict[str, int] = health(port).get("skip_reasons", {}).get(topic, {})
    return out


def members(port: int) -> list[str]:
    nodes = HTTP.get(f"http://127.0.0.1:{port}/v1/cluster", timeout=10).json()["nodes"]
    return sorted(n["endpoint"] for n in nodes)


def until(cond: Callable[[], Any], what: str, timeout: float = 60,
          show: Callable[[], Any] = lambda: None) -> None:
    """Poll ``cond`` until it is true (never asserts on how long it took); ``show()``
    says what was seen instead."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"gave up waiting for {what}: {show()!r}"
        time.sleep(0.2)
