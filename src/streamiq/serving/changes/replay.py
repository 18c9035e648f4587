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

__all__ = ["replay"]

_PARTITION_EOF = -191  # librdkafka's end-of-partition event
_TIMEOUT_S = 30.0


def replay(conf: Mapping[str, Any], topic: str, view: View, partitions: int,
           spans: Mapping[int, tuple[int, int]], wanted: Callable[[bytes], bool]
           ) -> list[Change]:
    """The rows at offsets ``start <= o < end`` of each partition in ``spans`` whose
    store key is ``wanted``, in offset order per partition."""
    from confluent_kafka import Consumer, TopicPartition

    todo = {p: span for p, span in spans.items() if span[0] < span[1]}
    if not todo:
        return []
    consumer = Consumer({"group.id": "streamiq-changes-replay", "enable.auto.commit": False,
                         "enable.auto.offset.store": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest", **conf})
    check = RowCheck(view, partitions)
    out: list[Change] = []
    deadline = time.monotonic() + _TIMEOUT_S
    try:
        consumer.assign([TopicPartition(topic, p, start) for p, (start, _) in todo.items()])
        while todo:
            if time.monotonic() > deadline:
                raise Unavailable(f"the changelog of {view.name!r} could not be read again "
                                  f"within {_TIMEOUT_S:.0f}s", partitions=sorted(todo))
            for m in consumer.consume(500, 0.2):
                _take(m, todo, check, wanted, out)
    finally:
        consumer.close()
    return out


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
