"""Materialise changelog partitions into the local stores.

One thread, one consumer with manual assignment (no group: ownership is decided by
streamiq's own assignment, not the broker). Each poll's records for a partition are
written with the partition's checkpoint in one RocksDB batch, so a restarted node
resumes from its store instead of replaying the changelog.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamiq.state.base import Checkpoint, Store
from streamiq.views.base import MARKER_HEADER, View, store_key

__all__ = ["Materializer", "PartitionState"]

log = logging.getLogger("streamiq.materializer")


@dataclass
class PartitionState:
    """In-memory view of one materialised partition (mirrors its checkpoint)."""

    offset: int = 0
    high_watermark: int = -1
    position: dict[str, dict[int, int]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    #: The changelog end seen when restoring began; the restore is complete once the
    #: partition's offset reaches it. A replica still restoring never answers, so a
    #: missing key is never reported "not found".
    target: int = -1
    restored: bool = False

    @property
    def lag(self) -> int:
        """Changelog records not yet applied; -1 while the end is not yet known."""
        return -1 if self.high_watermark < 0 else max(0, self.high_watermark - self.offset)


class Materializer:
    def __init__(self, kafka_conf: dict[str, Any], views: Mapping[str, View],
                 stores: Mapping[str, Store], topics: Mapping[str, str]) -> None:
        self._conf = kafka_conf
        self.views = dict(views)
        self.stores = dict(stores)
        self.topics = dict(topics)  # view -> changelog topic
        self._topic_view = {t: name for name, t in self.topics.items()}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self._wanted: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="materializer", daemon=True)

    # -- control (any thread) --
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def want(self, wanted: set[tuple[str, int]]) -> None:
        """Set the (view, partition) pairs to materialise; applied at the next poll."""
        with self._lock:
            self._wanted = set(wanted)

    def holding(self) -> dict[tuple[str, int], PartitionState]:
        return dict(self.states)

    # -- the loop --
    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        conf = {"group.id": "streamiq-materializer", "enable.auto.commit": False,
                "enable.auto.offset.store": False, "fetch.wait.max.ms": 20,
                "auto.offset.reset": "earliest", **self._conf}
        consumer = Consumer(conf)
        assigned: set[tuple[str, int]] = set()
        try:
            while not self._stop.is_set():
                with self._lock:
                    wanted = set(self._wanted)
                if wanted != assigned:
                    gone = assigned - wanted
                    new = wanted - assigned
                    if gone:
                        consumer.incremental_unassign(
                            [TopicPartition(self.topics[v], p) for v, p in gone])
                        for vp in gone:
                            self.states.pop(vp, None)
                    if new:
                        tps = []
                        for v, p in sorted(new):
                            cp = self.stores[v].checkpoint(p) or Checkpoint(offset=OFFSET_BEGINNING)
                            st = PartitionState(offset=max(cp.offset, 0), position=cp.position)
                            log.info("%s partition %d: resuming from changelog offset %d",
                                     v, p, st.offset)
                            self.states[(v, p)] = st
                            tps.append(TopicPartition(self.topics[v], p, cp.offset))
                        consumer.incremental_assign(tps)
                    assigned = wanted
                if not assigned:
                    time.sleep(0.05)
                    continue
                msgs = consumer.consume(2000, 0.05)
                self._apply(msgs)
                self._refresh_watermarks(consumer, assigned)
        except Exception:  # pragma: no cover - logged, the node reports itself unhealthy
            log.exception("materializer stopped")
            raise
        finally:
            consumer.close()

    def _apply(self, msgs: list[Any]) -> None:
        batches: dict[tuple[str, int], list[Any]] = defaultdict(list)
        for m in msgs:
            if m.error():
                if m.error().code() != -191:  # _PARTITION_EOF
                    log.warning("changelog fetch error: %s", m.error())
                continue
            view = self._topic_view.get(m.topic())
            if view is not None:
                batches[(view, m.partition())].append(m)
        for (view, p), records in batches.items():
            st = self.states.get((view, p))
            if st is None:
                continue
            if records[0].offset() < st.offset:
                # The consumer was reset below our checkpoint (topic re-created or
                # truncated): our rows describe a log that is gone.
                self._rebuild(view, p, st, records[0].offset())
            puts: list[tuple[bytes, bytes | None]] = []
            position = {t: dict(po) for t, po in st.position.items()}
            windowed = self.views[view].windowed
            for m in records:
                headers = m.headers()
                if headers and any(k == MARKER_HEADER for k, _ in headers):
                    doc = json.loads(m.value())
                    for t, po in doc["offsets"].items():
                        cur = position.setdefault(t, {})
                        for part, off in po.items():
                            cur[int(part)] = max(cur.get(int(part), 0), int(off))
                    continue
                key = m.key()
                if key is None:
                    continue
                value = m.value()
                if windowed:
                    if value is None:
                        continue
                    wstart = int(json.loads(value)["window_start"])
                    puts.append((store_key(key.decode(), wstart), value))
                else:
                    puts.append((key, value))
            next_offset = records[-1].offset() + 1
            self.stores[view].apply(p, puts, Checkpoint(offset=next_offset, position=position))
            st.offset = next_offset
            st.position = position

    def _rebuild(self, view: str, p: int, st: PartitionState, seen: int) -> None:
        log.warning("%s partition %d: changelog restarted (offset %d is below checkpoint %d); "
                    "rebuilding the partition from the log", view, p, seen, st.offset)
        self.stores[view].drop(p)
        st.offset, st.position, st.restored, st.target = 0, {}, False, -1

    def _refresh_watermarks(self, consumer: Any, assigned: set[tuple[str, int]]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        for v, p in assigned:
            st = self.states.get((v, p))
            if st is None:
                continue
            try:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topics[v], p), cached=True)
            except Exception:
                continue
            if high is None or high < 0:
                continue
            if high < st.offset:  # the log is now shorter than our checkpoint
                self._rebuild(v, p, st, high)
                try:
                    consumer.seek(TopicPartition(self.topics[v], p, OFFSET_BEGINNING))
                except Exception:  # not fetching yet: re-assign from the beginning
                    consumer.incremental_unassign([TopicPartition(self.topics[v], p)])
                    consumer.incremental_assign(
                        [TopicPartition(self.topics[v], p, OFFSET_BEGINNING)])
            st.high_watermark = high
            if st.target < 0:
                st.target = high
            if not st.restored and st.offset >= st.target:
                st.restored = True
                log.info("%s partition %d restored (%.2fs)", v, p,
                         time.monotonic() - st.started)
