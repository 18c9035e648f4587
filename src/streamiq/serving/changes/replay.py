"""A resumed subscription's missed changes, read again from the changelog in Kafka.

The changelog holds whole values keyed by view key, so the rows between a position and
where the store stands are exactly the changes a subscriber missed, in order (where
compaction removed a key's older rows, its newest one: still the exact end state).
Blocking: run in a worker thread. Rows are checked as the materializer checks them
(``views/rows.py``); one that is not a row of its view is skipped, as there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from streamiq.errors import Unavailable
from streamiq.kafka.skips import Skip
from streamiq.serving.changelog.feed import Change
from streamiq.views.base import MARKER_HEADER, View
from streamiq.views.rows import RowCheck

__all__ = ["Replay"]

_PARTITION_EOF = -191  # librdkafka's end-of-partition event
_TIMEOUT_S = 30.0
_BATCH = 500


class Replay:
    """The rows at offsets ``start <= o < end`` of each partition in ``spans`` whose
    store key is ``wanted``, in offset order per partition, a batch per ``next`` call:
    a stream far behind is sent as it is read, never held whole (up to
    ``--changes-replay-max`` rows), and its stream stays alive while it is read."""

    def __init__(self, conf: Mapping[str, Any], topic: str, view: View, partitions: int,
                 spans: Mapping[int, tuple[int, int]], wanted: Callable[[bytes], bool]
                 ) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.view = view.name
        self.todo = {p: span for p, span in spans.items() if span[0] < span[1]}
        self.check = RowCheck(view, partitions)
        self.wanted = wanted
        self.deadline = time.monotonic() + _TIMEOUT_S
        self.consumer: Any = None
        if self.todo:
            self.consumer = Consumer({
                "group.id": "streamiq-changes-replay", "enable.auto.commit": False,
                "enable.auto.offset.store": False, "enable.partition.eof": True,
                "auto.offset.reset": "earliest", **conf})
            self.consumer.assign([TopicPartition(topic, p, start)
                                  for p, (start, _) in self.todo.items()])

    def next(self) -> list[Change] | None:
        """The next rows read (empty: none came within 0.2 s), None once every span is
        read; ``Unavailable`` past ``_TIMEOUT_S`` without reaching the ends."""
        if not self.todo:
            return None
        if time.monotonic() > self.deadline:
            raise Unavailable(f"the changelog of {self.view!r} could not be read again "
                              f"within {_TIMEOUT_S:.0f}s", partitions=sorted(self.todo))
        out: list[Change] = []
        for m in self.consumer.consume(_BATCH, 0.2):
            _take(m, self.todo, self.check, self.wanted, out)
        return out

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None


def _take(m: Any, todo: dict[int, tuple[int, int]], check: RowCheck,
          wanted: Callable[[bytes], bool], out: list[Change]) -> None:
    p = m.partition()
    span = todo.get(p)
    if span is None:
        return
    if m.error():
        if m.error().code() == _PARTITION_EOF:
            del todo[p]  # nothing more: the store stands at or past this end
        return
    offset = m.offset()
    if offset >= span[1]:
        del todo[p]
        return
    if offset + 1 >= span[1]:
        del todo[p]
    if any(k == MARKER_HEADER for k, _ in m.headers() or ()):
        return
    try:
        key, value = check(m.key(), m.value(), p)
    except Skip:
        return
    except Exception:  # as the materializer: a record no check foresaw is skipped
        return
    if wanted(key):
        out.append(Change(p, offset, key, value, time.monotonic()))
