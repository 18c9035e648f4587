"""One poll's records of one changelog partition, read into what the store takes.

The materializer's per-record work, in one loop (a restore from the changelog spends
its time here: every record of the partition goes through it, issue 49): a record is a
row of its view (checked by :class:`~streamiq.views.rows.RowCheck`), a marker or a tick
row (each raises the partition's position, neither is stored). A record that is none
of them is skipped through ``skip``, never fatal. Once the partition is restored (it
answers reads), rows that carry their input positions are kept for consistent reads
and rows that carry their input time are measured through ``fresh``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamiq.kafka.skips import Skip
from streamiq.serving.changelog.markers import InputEnds, parse_marker
from streamiq.serving.changelog.partition import PartitionState
from streamiq.serving.changelog.ticks import TICK_KEY_PREFIX, TickClaims, merge
from streamiq.views.base import MARKER_HEADER, POSITION_HEADER, TICK_HEADER, TIME_HEADER
from streamiq.views.rows import RowCheck

__all__ = ["BATCH", "PARTITION_EOF", "Batch", "fetch", "read_batch"]

#: records applied per round at most, and the longest a round waits for the first one
BATCH = 2000
_POLL_S = 0.05
#: librdkafka's "end of partition" event (RD_KAFKA_RESP_ERR__PARTITION_EOF)
PARTITION_EOF = -191

#: ``skip(offset, reason, exc)``; ``fresh(time header, (timestamp type, epoch ms))``
SkipFn = Callable[[int, str, Exception], None]
FreshFn = Callable[[bytes, tuple[int, int]], None]


def fetch(consumer: Any) -> list[Any]:
    """What the consumer has, as soon as it has anything (at most ``_POLL_S``' wait):
    librdkafka's batch ``consume(n, timeout)`` waits out its whole timeout unless ``n``
    records come (measured: a record produced during ``consume(2000, 1.0)`` came back
    800 ms later; with ``poll`` first, 9 ms), and a node's every row would have waited
    up to that timeout before it was stored."""
    first = consumer.poll(_POLL_S)
    return [] if first is None else [first, *consumer.consume(BATCH - 1, 0)]


class Batch:
    """What one partition's records came to, in their order."""

    __slots__ = ("marked", "offsets", "puts", "versions")

    def __init__(self) -> None:
        #: the store's ``(key, value)`` per row (value None: a tombstone)
        self.puts: list[tuple[bytes, bytes | None]] = []
        self.offsets: list[int] = []  # each put's changelog offset (for the feed)
        #: ``(key, input positions, value)`` of rows that carry positions (restored only)
        self.versions: list[tuple[bytes, bytes, bytes | None]] = []
        self.marked = False  # a marker or ticks raised the position


def read_batch(records: list[Any], p: int, st: PartitionState, check: RowCheck,
               ends: InputEnds, position: dict[str, dict[int, int]], skip: SkipFn,
               fresh: FreshFn) -> Batch:
    """Read ``records`` (confluent-kafka messages of changelog partition ``p``, in
    offset order), raising ``position`` by their markers and ticks."""
    out = Batch()
    puts, offsets, versions = out.puts, out.offsets, out.versions
    following, windowed = st.restored, check.windowed
    for m in records:
        try:
            pos = ts = tick = None
            marker = False
            for k, v in m.headers() or ():
                if k == MARKER_HEADER:
                    marker = True
                    break
                if k == POSITION_HEADER:
                    pos = v
                elif k == TIME_HEADER:
                    ts = v
                elif k == TICK_HEADER:
                    tick = v
            if marker:
                _marker(m.value(), ends, position)
                out.marked = True
                continue
            key = m.key()
            if key is not None and key.startswith(TICK_KEY_PREFIX):
                # never stored: it makes the position (ticks.py)
                st.ticks = st.ticks or TickClaims(p)
                out.marked |= merge(position, st.ticks.add(key, tick, pos))
                continue
            row = check(key, m.value(), p)
            puts.append(row)
            offsets.append(m.offset())
            if following:
                # a partition still restoring answers no read: its rows' positions
                # would only be kept to be forgotten (a read after it waits for a
                # marker: never wrong), and it measures no freshness
                if pos is not None and not windowed:
                    versions.append((row[0], pos, row[1]))
                if ts is not None:
                    fresh(ts, m.timestamp())
        except Skip as exc:
            skip(m.offset(), exc.reason, exc)
        except Exception as exc:  # a record no check foresaw: still never fatal
            skip(m.offset(), "undecodable", exc)
    return out


def _marker(value: bytes | None, ends: InputEnds, position: dict[str, dict[int, int]]) -> None:
    offsets = parse_marker(value)
    ends.check(offsets)
    merge(position, {(t, part): off for t, po in offsets.items() for part, off in po.items()})
