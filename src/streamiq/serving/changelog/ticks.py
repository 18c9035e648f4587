"""Ticks on the serving side: tick rows make a partition's position, reads write ticks.

The pipeline folds a tick (an input record keyed ``views/base.TICK_KEY``) into one row
per (aggregation task, changelog partition): ``pipeline/ticks.py`` says why a partition
that holds *every* task's tick row at or past input offset ``o`` of partition ``p``
holds every row of the input records of ``p`` before ``o``. :class:`TickClaims` keeps,
per changelog partition, each task's newest claims and gives the position they make
together (``topic -> partition -> next offset``, as a marker's), which the materializer
merges into the partition's position: reads wait on it exactly as on markers.

A tick row is checked before it is believed: its key must be one the pipeline crafts
(``~tick~<task>.<partition>.<n>``), for this partition, and name the task its
``streamiq-tick`` header (``task/tasks``, the task from Spark's ``spark_partition_id``)
says wrote it. A mismatch means the pipeline crafted keys for another task count than
its query runs with (then some task may never see a tick): the row is skipped and
counted, and the partition keeps waiting for markers. Tick rows are never stored.

:class:`Ticker` writes ticks: a read that waits for a position (``Node.wait_position``)
asks for one tick in each input partition its tokens name, written after the read
arrived, so at an offset past every token it carries. At most one is written per input
partition every :data:`MIN_GAP_S`; a read arriving after the newest was written asks for
the next.

A read bounded by staleness (``max_staleness_ms`` S) asks :meth:`Ticker.recent`: per
input partition, the offset of the newest tick this node wrote at or after now - S and
saw delivered (one is written when there is none). A partition reflecting those offsets
holds every input record appended before the ticks, so everything written more than S
before the read: the ticks' offsets are the read's position.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from streamiq.kafka.clientlog import serve_logs
from streamiq.kafka.skips import Skip
from streamiq.serving.changelog.consistency import Token, parse_tokens
from streamiq.views.base import TICK_KEY, TICK_PREFIX

__all__ = ["MIN_GAP_S", "TICK_KEY_PREFIX", "TickClaims", "Ticker", "merge"]

log = logging.getLogger("streamiq.ticks")

#: the shortest time between two ticks written to one input partition by one node
MIN_GAP_S = 0.002
#: the deliveries remembered per input partition (the newest answers a staleness bound;
#: a settled cut looks for the oldest still recent)
_KEPT = 32
#: aggregation tasks a tick header may name (Spark's shuffle partitions of one query)
_MAX_TASKS = 4096
#: a tick row's key starts with it (its bytes)
TICK_KEY_PREFIX = TICK_PREFIX.encode()
Claims = dict[tuple[str, int], int]


def _crafted(key: bytes) -> tuple[int, int]:
    """The (task, partition) a tick key was crafted for (Skip if it is none)."""
    try:
        task, part, _ = key[len(TICK_KEY_PREFIX):].split(b"|")[0].split(b".")
        return int(task), int(part)
    except ValueError:
        raise Skip("bad_tick", f"not a tick key: {key[:60]!r}") from None


class TickClaims:
    """One changelog partition's tick rows: per task count, each task's newest claims."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self._tasks: dict[int, dict[int, Claims]] = {}  # tasks -> task -> claims

    def add(self, key: bytes, header: bytes | None, pos: bytes | None) -> Claims:
        """Take one tick row; the position every task's ticks now make together for the
        input partitions this row named (``(topic, partition) -> next offset``), or {}."""
        task, part = _crafted(key)
        try:
            said, tasks = (int(x) for x in (header or b"").decode().split("/"))
        except (ValueError, UnicodeDecodeError):
            raise Skip("bad_tick", f"tick header {header[:40] if header else None!r} is "
                       "not task/tasks") from None
        if not (0 <= said < tasks <= _MAX_TASKS) or said != task or part != self.partition:
            raise Skip("misrouted_tick", f"tick row {key[:60]!r} came from task {said} of "
                       f"{tasks} in partition {self.partition}: crafted for task {task}, "
                       f"partition {part}")
        try:
            claims = {(t, p): o for t, p, o in parse_tokens((pos or b"").decode())}
        except (ValueError, UnicodeDecodeError):
            raise Skip("bad_tick", "tick row without readable positions") from None
        mine = self._tasks.setdefault(tasks, {}).setdefault(task, {})
        for tp, o in claims.items():
            mine[tp] = max(mine.get(tp, -1), o)
        every = self._tasks[tasks]
        if len(every) < tasks:
            return {}
        return {tp: min(c.get(tp, -1) for c in every.values()) + 1 for tp in claims
                if all(tp in c for c in every.values())}


class Ticker:
    """Writes ticks to input partitions for waiting reads (any thread)."""

    def __init__(self, make_producer: Callable[[], Any]) -> None:
        self._make = make_producer
        self._producer: Any = None
        self._lock = threading.Lock()
        self._last: dict[tuple[str, int], float] = {}  # when the newest tick was written
        self._timers: dict[tuple[str, int], threading.Timer] = {}
        #: per input partition, the last ticks seen delivered: (written at, offset)
        self._deliveries: dict[tuple[str, int], deque[tuple[float, int]]] = {}
        self._partitions: dict[str, int] = {}  # input topics' partition counts
        self.written = 0
        self.failed = 0
        serve_logs(self._serve)

    def recent(self, topic: str, since: float) -> tuple[list[Token], list[int]]:
        """The newest delivered tick of each partition of ``topic`` written at ``since``
        (monotonic) or later, as tokens, and the partitions without one (a tick is asked
        for each; :meth:`poll` hears of their delivery)."""
        found: list[Token] = []
        missing: list[int] = []
        for p in range(self.partitions(topic)):
            got = max(list(self._deliveries.get((topic, p), ())), default=None)
            if got is not None and got[0] >= since:
                found.append((topic, p, got[1]))
            else:
                missing.append(p)
                self.ask(topic, p, since)
        return found, missing

    def oldest_since(self, topic: str, partition: int, since: float) -> int | None:
        """The offset of the oldest tick of the last few delivered to ``partition`` that
        was written at ``since`` (monotonic) or later; None if there is none."""
        for at, offset in list(self._deliveries.get((topic, partition), ())):
            if at >= since:
                return offset
        return None

    def known_partitions(self, topic: str) -> int | None:
        """``topic``'s partition count if Kafka was asked already (never blocks)."""
        return self._partitions.get(topic)

    def partitions(self, topic: str) -> int:
        """``topic``'s partition count (Kafka asked once; the tick producer's metadata)."""
        n = self._partitions.get(topic)
        if n is None:
            try:
                md = self._client().list_topics(topic, timeout=10).topics.get(topic)
            except Exception as exc:  # KafkaException: the broker did not answer
                raise LookupError(f"input topic {topic!r}: {exc}") from None
            if md is None or md.error is not None or not md.partitions:
                raise LookupError(f"input topic {topic!r} not found")
            n = self._partitions[topic] = len(md.partitions)
        return n

    def poll(self) -> None:
        """Hear of deliveries now (a staleness read waiting for its ticks' offsets)."""
        producer = self._producer
        if producer is not None:
            producer.poll(0)

    def _client(self) -> Any:
        with self._lock:
            if self._producer is None:
                self._producer = self._make()
            return self._producer

    def _serve(self) -> None:
        """The producer's log lines and failed deliveries as they come."""
        producer = self._producer  # close() may let it go meanwhile
        if producer is not None:
            producer.poll(0)

    def ask(self, topic: str, partition: int, since: float) -> None:
        """A tick in ``topic``'s ``partition`` written at ``since`` (monotonic) or later."""
        tp = (topic, partition)
        with self._lock:
            last = self._last.get(tp, float("-inf"))
            if last >= since or tp in self._timers:
                return
            wait = last + MIN_GAP_S - time.monotonic()
            if wait > 0:
                timer = self._timers[tp] = threading.Timer(wait, self._due, (tp,))
                timer.daemon = True
                timer.start()
                return
            self._last[tp] = time.monotonic()
        self._write(tp)

    def _due(self, tp: tuple[str, int]) -> None:
        with self._lock:
            self._timers.pop(tp, None)
            self._last[tp] = time.monotonic()
        self._write(tp)

    def _write(self, tp: tuple[str, int]) -> None:
        at = time.monotonic()
        try:
            producer = self._client()
            producer.produce(tp[0], key=TICK_KEY, value=b"{}", partition=tp[1],
                             on_delivery=lambda err, msg: self._delivered(err, msg, at))
            producer.poll(0)
            self.written += 1
        except Exception as exc:  # a tick is an optimisation: the read waits for markers
            self._failed(tp[0], tp[1], exc)

    def _delivered(self, err: Any, msg: Any, at: float) -> None:
        if err is not None:
            self._failed(msg.topic(), msg.partition(), err)
            return
        tp = (msg.topic(), msg.partition())
        self._deliveries.setdefault(tp, deque(maxlen=_KEPT)).append((at, msg.offset()))

    def _failed(self, topic: str, partition: int, why: Any) -> None:
        """Counted; logged at the 1st, 2nd, 4th, 8th... failure."""
        self.failed += 1
        if self.failed & (self.failed - 1) == 0:
            log.warning("tick to %s partition %s not written (%d failed in all): %s",
                        topic, partition, self.failed, why)

    def close(self) -> None:
        with self._lock:
            for t in self._timers.values():
                t.cancel()
            self._timers.clear()
        if self._producer is not None:
            self._producer.flush(2)
            self._producer = None  # nothing polls it after the node's stop


def merge(position: dict[str, dict[int, int]], made: Mapping[tuple[str, int], int]) -> bool:
    """Raise ``position`` to what ticks ``made``; True when it moved."""
    moved = False
    for (t, p), nxt in made.items():
        cur = position.setdefault(t, {})
        if nxt > cur.get(p, 0):
            cur[p] = nxt
            moved = True
    return moved
