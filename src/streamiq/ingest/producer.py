"""The ingest's Kafka producer: idempotent, Kafka's default (murmur2) partitioner, each
delivery handed to the event loop.

confluent-kafka reports a delivery from ``poll``, in the thread that polls. A thread of
ours polls (blocked in librdkafka until a report comes) and queues the reports; the
event loop is woken once per poll that served any (``call_soon_threadsafe`` writes to
the loop's wake-up pipe), not once per record, and runs each write's callback: at 5,000
writes/s one wake-up carries the reports of one produce request's batch (measured in
docs/design.md, "The ingest's write path").

``produce`` (a callback per record) is the lean write path's (``ingest/lean.py``);
``send`` (awaitable) the FastAPI routes'.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import Any

__all__ = ["Delivered", "Producer"]

#: What a write's callback gets: (partition, offset, None), or (-1, -1, the failure).
Delivered = Callable[[int, int, Exception | None], None]


class Producer:
    """Made in the event loop it reports to (the ingest app's lifespan)."""

    def __init__(self, conf: dict[str, Any]) -> None:
        from confluent_kafka import Producer as _Producer

        self._p = _Producer({"enable.idempotence": True, "partitioner": "murmur2_random",
                             "linger.ms": 1, **conf})
        self._loop = asyncio.get_running_loop()
        self._reports: deque[tuple[Delivered, Any, Any]] = deque()  # thread-safe ends
        self._woken = False  # a drain is scheduled on the loop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="ingest-poll", daemon=True)
        self._thread.start()

    def produce(self, topic: str, key: str, value: dict[str, Any], then: Delivered) -> None:
        """Queue one record; ``then`` runs on the loop once the broker acknowledged it (or
        not). Raises (``BufferError``, ``KafkaException``) when it cannot be queued."""
        self._p.produce(topic, key=key.encode(), value=json.dumps(value).encode(),
                        on_delivery=partial(self._reports_append, then))

    async def send(self, topic: str, key: str, value: dict[str, Any]) -> tuple[int, int]:
        """``produce``, awaited: (partition, offset), or the failure raised."""
        fut: asyncio.Future[tuple[int, int]] = self._loop.create_future()
        self.produce(topic, key, value, partial(_settle, fut))
        return await fut

    def _reports_append(self, then: Delivered, err: Any, msg: Any) -> None:
        self._reports.append((then, err, msg))  # the polling thread

    def _poll(self) -> None:
        while not self._stop.is_set():
            self._p.poll(0.05)
            if self._reports and not self._woken:
                self._woken = True
                try:
                    self._loop.call_soon_threadsafe(self._drain)
                except RuntimeError:  # the loop is closed: nobody waits any more
                    return

    def _drain(self) -> None:
        """On the loop: every queued report to its write. The flag drops first, so a
        report queued while this runs schedules the next drain."""
        self._woken = False
        reports = self._reports
        while reports:
            then, err, msg = reports.popleft()
            if err is None:
                then(msg.partition(), msg.offset(), None)
            else:
                then(-1, -1, RuntimeError(str(err)))

    def close(self) -> None:
        self._p.flush(10)
        self._stop.set()
        self._thread.join(2)


def _settle(fut: asyncio.Future[tuple[int, int]], partition: int, offset: int,
            exc: Exception | None) -> None:
    if fut.done():
        return
    if exc is None:
        fut.set_result((partition, offset))
    else:
        fut.set_exception(exc)
