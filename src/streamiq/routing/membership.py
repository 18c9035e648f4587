"""Cluster membership through a heartbeat topic.

Each node publishes a heartbeat every ``heartbeat_ms`` to ``_streamiq-<cluster>-members``
carrying its endpoint and, per view partition it materialises, its changelog offset
and lag. Every node reads the topic, so every node sees the same members and the
same replica freshness. A member silent for ``member_timeout_ms`` is dead (1.5 s by
default: inside ksqlDB's 2 s detection target, without waiting for a broker session
timeout); a node that stops cleanly publishes ``leaving`` and is dropped at once.
Only members of the same cluster topic are ever routed to.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Member", "Membership", "members_topic"]

log = logging.getLogger("streamiq.membership")

_SELF_TTL = 0.05  # seconds this node's own report may be reused by live()


def members_topic(cluster: str) -> str:
    return f"_streamiq-{cluster}-members"


@dataclass
class Member:
    endpoint: str
    incarnation: str
    seen: float
    # view -> partition -> {"offset": int, "lag": int}
    partitions: dict[str, dict[int, dict[str, int]]] = field(default_factory=dict)
    started_at: float = 0.0


class Membership:
    """Publishes this node's heartbeat and tracks the live members of the cluster."""

    def __init__(self, kafka_conf: dict[str, Any], topic: str, endpoint: str,
                 report: Callable[[], dict[str, dict[int, dict[str, int]]]],
                 heartbeat_ms: int = 250, timeout_ms: int = 1500) -> None:
        self._conf = kafka_conf
        self.topic = topic
        self.endpoint = endpoint
        self.incarnation = uuid.uuid4().hex
        self.started_at = time.time()
        self._report = report
        self._interval = heartbeat_ms / 1000
        self._timeout = timeout_ms / 1000
        self._members: dict[str, Member] = {}
        self._suspects: dict[str, float] = {}
        self._lock = threading.Lock()
        self._own: Member | None = None
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._publish, name="heartbeat", daemon=True),
                         threading.Thread(target=self._listen, name="members", daemon=True)]
        self.on_change: Callable[[], None] | None = None

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)

    def live(self) -> dict[str, Member]:
        """Members heard from within the timeout (always including this node)."""
        now = time.monotonic()
        with self._lock:
            out = {e: m for e, m in self._members.items()
                   if now - m.seen <= self._timeout and self._suspects.get(e, 0) < m.seen}
        if self.endpoint not in out:
            out[self.endpoint] = self._me(now)
        return out

    def _me(self, now: float) -> Member:
        """This node's own entry, rebuilt at most every ``_SELF_TTL`` seconds: routing
        asks for the members on every query, and the report walks every partition."""
        if self._own is None or now - self._own.seen > _SELF_TTL:
            self._own = Member(self.endpoint, self.incarnation, now, self._report(),
                               self.started_at)
        return self._own

    def suspect(self, endpoint: str) -> None:
        """Route around a member that refused a connection until it heartbeats again."""
        if endpoint == self.endpoint:
            return
        with self._lock:
            self._suspects[endpoint] = time.monotonic()
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _heartbeat(self, leaving: bool = False) -> bytes:
        doc = {"endpoint": self.endpoint, "incarnation": self.incarnation,
               "started_at": self.started_at, "leaving": leaving,
               "partitions": {} if leaving else self._report()}
        return json.dumps(doc).encode()

    def _publish(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({"linger.ms": 0, "acks": "1", **self._conf})
        try:
            while not self._stop.is_set():
                producer.produce(self.topic, key=self.endpoint.encode(), value=self._heartbeat())
                producer.poll(0)
                self._stop.wait(self._interval)
            producer.produce(self.topic, key=self.endpoint.encode(),
                             value=self._heartbeat(leaving=True))
        finally:
            producer.flush(2)

    def _listen(self) -> None:
        from confluent_kafka import OFFSET_END, Consumer, TopicPartition

        consumer = Consumer({"group.id": "streamiq-membership", "enable.auto.commit": False,
                             "fetch.wait.max.ms": 20, **self._conf})
        consumer.assign([TopicPartition(self.topic, 0, OFFSET_END)])
        try:
            while not self._stop.is_set():
                for m in consumer.consume(100, 0.1):
                    value = m.value()
                    if m.error() or value is None:
                        continue
                    self._on_heartbeat(json.loads(value))
        finally:
            consumer.close()

    def _on_heartbeat(self, doc: dict[str, Any]) -> None:
        endpoint = doc["endpoint"]
        if endpoint == self.endpoint:
            return
        now = time.monotonic()
        with self._lock:
            old = self._members.get(endpoint)
            if doc.get("leaving"):
                self._members.pop(endpoint, None)
                changed = old is not None
            else:
                parts = {v: {int(p): s for p, s in ps.items()}
                         for v, ps in doc.get("partitions", {}).items()}
                self._members[endpoint] = Member(endpoint, doc["incarnation"], now, parts,
                                                 float(doc.get("started_at", 0)))
                changed = old is None or now - old.seen > self._timeout
        if changed:
            self._changed()
