"""Materialise changelog partitions into the local stores.

One thread, one consumer with manual assignment (no group: ownership is decided by
streamiq's own assignment, not the broker). Each poll's records for a partition are
written with the partition's checkpoint in one RocksDB batch, so a restarted node
resumes from its store instead of replaying the changelog.

Fails closed: the thread is supervised (``supervise.py``). When the loop raises,
``states`` is emptied at once, so the node holds nothing, reports nothing restored in its
heartbeats and answers no lookup from rows that stopped moving; the restarted loop is a
fresh consumer resuming from the stores' checkpoints (exactly the rows already applied)
and each partition answers again once it has restored.

Tick rows (``serving/changelog/ticks.py``) raise a partition's position as markers do,
and are not stored. Rows that carry their input positions (header ``streamiq-pos``:
the pipeline's own views, ``pipeline/positions.py``) are remembered per key until a
marker or ticks cover them
(:attr:`PartitionState.rows`), so a read of the written key is answered as soon as its
row is stored (``Node.wait_position``). Rows that carry their newest input time
(``streamiq-ts``) are measured once the partition is restored: write to stored, per view
(:attr:`Materializer.freshness`).

No changelog record stops it: one that is not a row of its view (``views/rows.py``:
size, JSON, nesting, key, partition, column types, window) or a marker claiming what
cannot be (``serving/changelog/markers.py``) is skipped and counted per view and reason
(``skips``); its offset still advances, so a restart does not meet it again.

Test seam: ``before_apply`` (this module) is None in production (one check per poll,
none per record). Tests install a callable there that raises on some records, standing
for a bug or an I/O error; in a node process, through the launcher ``tests/faultnode.py``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, OrderedDict, defaultdict
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any

from streamiq.kafka.skips import Skips
from streamiq.metrics import Latency
from streamiq.serving.changelog.consistency import row_covered
from streamiq.serving.changelog.cuts import History
from streamiq.serving.changelog.feed import Feed
from streamiq.serving.changelog.markers import EndsQuery, InputEnds, kafka_ends
from streamiq.serving.changelog.partition import PartitionState
from streamiq.serving.changelog.records import PARTITION_EOF, fetch, read_batch
from streamiq.state.base import Checkpoint, Store
from streamiq.supervise import Supervisor
from streamiq.views.base import View
from streamiq.views.rows import RowCheck

__all__ = ["AT_ONCE", "COPY_MIN_RECORDS", "FRESHNESS_BUCKETS", "MAX_ROW_POSITIONS", "Materializer",
           "PartitionState"]

log = logging.getLogger("streamiq.materializer")

#: changelog records from which a partition never held is copied from a peer (when one
#: holds it: ``bootstrap``) rather than replayed: about a second's worth of replay
COPY_MIN_RECORDS = 50_000
#: partitions copied from a peer or replayed by a process of their own at once: one per
#: core and one more (bench_scale, 3 partitions on 2 cores, replayed in processes: 3 at
#: once went 1.26-1.30x the node's own thread, 2 at once 1.05-1.26x, the last one alone)
AT_ONCE = min((os.cpu_count() or 1) + 1, 8)
#: rows' input positions remembered per partition until a marker covers them; past
#: this, the oldest are forgotten (their reads then wait for the marker: never wrong)
MAX_ROW_POSITIONS = 100_000
#: seconds, write to stored: milliseconds in real-time mode, a second in micro-batch
FRESHNESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                     60.0)

#: Test seam, None in production: called (loop thread) with each poll's fetched records
#: before any of them is applied; what it raises crashes the loop, as a bug would.
before_apply: Callable[[list[Any]], None] | None = None


class Materializer:
    def __init__(self, kafka_conf: dict[str, Any], views: Mapping[str, View],
                 stores: Mapping[str, Store], topics: Mapping[str, str],
                 supervisor: Supervisor | None = None,
                 on_apply: Callable[[], None] | None = None,
                 partitions: Mapping[str, int] | None = None,
                 input_ends: EndsQuery | None = None) -> None:
        self._conf = kafka_conf
        self.views = dict(views)
        self.stores = dict(stores)
        self.topics = dict(topics)  # view -> changelog topic
        self._topic_view = {t: name for name, t in self.topics.items()}
        self.states: dict[tuple[str, int], PartitionState] = {}
        self._wanted: set[tuple[str, int]] = set()
        #: view -> changelog partitions: a row in another partition than its key's is
        #: skipped (a view missing here is not checked)
        self.partitions = dict(partitions or {})
        self._skips: dict[str, Skips] = {}  # per view (a log line at the 1st, 2nd, 4th...)
        self._checks: dict[str, RowCheck] = {}  # per view, made when its first row comes
        self.ends = InputEnds(input_ends or kafka_ends(kafka_conf))
        #: changelog records fetched since this node started, per view (a restore from
        #: a checkpoint reads only what came after it; from empty, after compaction,
        #: about one record per key)
        self.read: Counter[str] = Counter()
        #: write to stored per view: a row's newest input time to when it was stored
        #: (rows with a ``streamiq-ts`` header, once their partition is restored)
        self.freshness = Latency(("view",), FRESHNESS_BUCKETS)
        #: the same rows' time in two stages, per (view, stage): ``pipeline``, the input
        #: time to the changelog record's (Spark's sink producing it); ``node``, that to
        #: stored here (fetched and applied). On one host's clock; across hosts, skewed
        self.stages = Latency(("view", "stage"), FRESHNESS_BUCKETS)
        self.on_apply = on_apply  # called (loop thread) after records were applied
        #: copies a partition this node never held from a peer into its store, True if
        #: it did (``serving/cluster/bootstrap.py``; None: always the changelog)
        self.bootstrap: Callable[[str, int], bool] | None = None
        self._copies: dict[tuple[str, int], Future[bool]] = {}
        self._copier: ThreadPoolExecutor | None = None
        #: live subscriptions: each applied batch handed to them (``feed.py``)
        self.feed = Feed()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.supervisor = supervisor or Supervisor()
        self._thread = self.supervisor.thread("materializer", self._run, self._stop)

    # -- control (any thread) --
    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._copier is not None:  # a copy under way ends at its own pace
            self._copier.shutdown(wait=False, cancel_futures=True)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(10)

    def halt(self) -> None:
        """Stop and hold nothing from now on (the node failed): no answers from here."""
        with self._lock:
            self._stop.set()
            self.states = {}
        with self.feed.lock:
            self.feed.end_all("the node failed")

    @property
    def stopped(self) -> bool:
        """Stopped or halted: the loop runs no more."""
        return self._stop.is_set()

    def forget(self) -> None:
        """After a crash: nothing is held until the restarted loop has restored it."""
        with self._lock:
            self.states = {}
        with self.feed.lock:
            self.feed.end_all("the node's materializer restarts")

    def add_view(self, view: View, store: Store, topic: str,
                 partitions: int | None = None) -> None:
        """Materialise one more view (found while running); its partitions are wanted
        through ``want`` as usual. The maps are replaced, not changed, for the loop."""
        with self._lock:
            self.views = {**self.views, view.name: view}
            self.stores = {**self.stores, view.name: store}
            self.topics = {**self.topics, view.name: topic}
            self._topic_view = {**self._topic_view, topic: view.name}
            if partitions is not None:
                self.partitions = {**self.partitions, view.name: partitions}
            self._checks.pop(view.name, None)

    def want(self, wanted: set[tuple[str, int]]) -> None:
        """Set the (view, partition) pairs to materialise; applied at the next poll."""
        with self._lock:
            self._wanted = set(wanted)

    def holding(self) -> dict[tuple[str, int], PartitionState]:
        return dict(self.states)

    # -- the loop --
    def _run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        # A partition's end is taken once a fetch for it has answered: with a record, or
        # with the end of the partition (enable.partition.eof), so never a stale cached
        # end. fetch.wait.max.ms bounds how long an idle fetch is held by the broker, so
        # a newly held partition's first answer comes within about two of them (at most
        # a second: a partition newly held restores for longer than that); a record is
        # answered at once either way. 500 ms, librdkafka's default: three idle nodes'
        # fetches took the broker about 3% of a core at 100 ms (docs/design.md, "What an
        # idle cluster costs"). fetch.queue.backoff.ms: librdkafka stops fetching a
        # partition whose queue is past queued.min.messages for that long (1 s by
        # default), and a restore drains a queue in less: it read in bursts with half a
        # second of nothing between them (about 106k keys/s in process; 10 ms: 190k, and
        # one batch after another, bench/bench_restore_fetch.py)
        conf = {"group.id": "streamiq-materializer", "enable.auto.commit": False,
                "enable.auto.offset.store": False, "auto.offset.reset": "earliest",
                "enable.partition.eof": True, "fetch.wait.max.ms": 500,
                "fetch.queue.backoff.ms": 10, **self._conf}
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
                        with self.feed.lock:
                            for vp in gone:
                                self.states.pop(vp, None)
                                self.feed.end(*vp, "the partition was handed over")
                    copying = self._copying(consumer, new)  # held back: copied from a peer
                    new -= copying
                    if new:
                        tps = []
                        for v, p in sorted(new):
                            # from empty: offset 0, not OFFSET_BEGINNING, which librdkafka
                            # first asks the broker for, and a consumer that does not know
                            # the leader yet asks again only 500 ms later (a log that no
                            # longer starts at 0 is reset to its start: earliest)
                            cp = self.stores[v].checkpoint(p) or Checkpoint(offset=0)
                            st = PartitionState(offset=max(cp.offset, 0), position=cp.position)
                            if not self.views[v].windowed:
                                st.history = History()
                            log.info("%s partition %d: resuming from changelog offset %d",
                                     v, p, st.offset)
                            self._at_end(consumer, v, p, st)
                            with self._lock:  # halt() empties states under the same lock
                                if self._stop.is_set():
                                    return
                                self.states[(v, p)] = st
                            tps.append(TopicPartition(self.topics[v], p, cp.offset))
                        consumer.incremental_assign(tps)
                    assigned = wanted - copying
                if not assigned:
                    time.sleep(0.05)
                    continue
                self.apply(fetch(consumer))
                self._refresh_watermarks(consumer, assigned)
        except Exception:
            self.forget()  # before anything else (closing the consumer may take a while)
            raise
        finally:
            try:
                consumer.close()
            except Exception as exc:  # the loop's own exception, if any, is the one told
                log.warning("materializer: closing the consumer failed: %r", exc)

    def _copying(self, consumer: Any, new: set[tuple[str, int]]) -> set[tuple[str, int]]:
        """Of the partitions newly wanted, those being copied from a peer (not assigned
        yet). A partition this node never held (its store has no checkpoint) whose
        changelog holds ``COPY_MIN_RECORDS`` or more is first offered to ``bootstrap``
        in a worker thread; whether the copy was taken in or not, the partition is then
        assigned from the store's checkpoint as always: the copy's, or none (the
        changelog from its start)."""
        if self.bootstrap is None:
            return set()
        out = set()
        for v, p in new:
            job = self._copies.get((v, p))
            if job is None:
                if self.stores[v].checkpoint(p) is not None:
                    continue  # it follows on from its own rows
                if self._end(consumer, v, p) < COPY_MIN_RECORDS:
                    continue  # replayed as fast as copied (and a fresh cluster: no peer)
                if self._copier is None:
                    self._copier = ThreadPoolExecutor(AT_ONCE, thread_name_prefix="copy")
                job = self._copies[(v, p)] = self._copier.submit(self.bootstrap, v, p)
            if job.done():
                del self._copies[(v, p)]
                continue
            out.add((v, p))
        return out

    def _at_end(self, consumer: Any, view: str, p: int, st: PartitionState) -> None:
        """A partition newly held whose checkpoint is already its changelog's end (asked
        of the broker, never librdkafka's cached end) is restored at once: a fetch at
        the end is held by the broker for fetch.wait.max.ms before it says so, half a
        second more for every restart, copy from a peer and empty partition. (Kafka
        Streams' changelog reader does the same: a changelog whose listed end is its
        position is restored.) It then holds the changelog as of the question: a write
        after it is seen once the consumer's first fetch of the partition answers,
        milliseconds on a known leader (a consumer that must look it up again, after a
        reconnect or for a new topic: a second or more), as any replica sees a write
        one fetch later; a read that carries a position waits for it as always."""
        end = self._end(consumer, view, p, unknown=-1, timeout=1)  # else: fetched as always
        if 0 <= end == st.offset:
            st.fetched, st.high_watermark, st.target, st.restored = True, end, end, True
            log.info("%s partition %d restored (at its changelog's end, offset %d)",
                     view, p, end)

    def _end(self, consumer: Any, view: str, p: int, unknown: int = 0,
             timeout: float = 5) -> int:
        """The changelog partition's end offset, asked of the broker (``unknown`` when
        it does not say within ``timeout`` seconds)."""
        from confluent_kafka import TopicPartition

        try:
            _, high = consumer.get_watermark_offsets(TopicPartition(self.topics[view], p),
                                                     timeout=timeout)
        except Exception as exc:
            log.warning("%s partition %d: changelog end unknown (%r)", view, p, exc)
            return unknown
        return unknown if high is None or high < 0 else int(high)

    def apply(self, msgs: list[Any]) -> None:
        """Apply fetched changelog records to the stores of the partitions held (the
        loop's thread; a record that cannot be read is skipped and counted)."""
        if before_apply is not None:
            before_apply(msgs)
        batches: dict[tuple[str, int], list[Any]] = defaultdict(list)
        for m in msgs:
            if m.error():
                if m.error().code() == PARTITION_EOF:
                    self._fetched(m.topic(), m.partition())
                else:
                    log.warning("changelog fetch error: %s", m.error())
                continue
            view = self._topic_view.get(m.topic())
            if view is not None:
                batches[(view, m.partition())].append(m)
        for (view, p), records in batches.items():
            st = self.states.get((view, p))
            if st is None:
                continue
            st.fetched = True
            self.read[view] += len(records)
            if records[0].offset() < st.offset:
                # The consumer was reset below our checkpoint (topic re-created or
                # truncated): our rows describe a log that is gone.
                self._rebuild(view, p, st, records[0].offset())
            position = {t: dict(po) for t, po in st.position.items()}
            got = read_batch(records, p, st, self._check(view), self.ends, position,
                             partial(self._skip, view, p), partial(self._fresh, view))
            puts = got.puts
            next_offset = records[-1].offset() + 1
            if not st.restored:  # the restore's progress (restore_progress)
                st.restore_bytes += sum(len(k) + len(v) for k, v in puts if v is not None)
            self._versions(view, p, st, got.versions)  # before the store: a read finds them
            with self.feed.lock:  # subscriptions read their first values under it
                self.stores[view].apply(p, puts, Checkpoint(offset=next_offset,
                                                            position=position))
                st.offset = next_offset
                st.position = position
                if puts and self.feed.watched(view, p):
                    self.feed.publish(view, p, self.views[view].windowed,
                                      [(o, k, v) for o, (k, v) in zip(got.offsets, puts,
                                                                      strict=True)])
            self._remember(st, {k: pos for k, pos, _ in got.versions}, got.marked)
        if batches and self.on_apply is not None:
            self.on_apply()

    def _versions(self, view: str, p: int, st: PartitionState,
                  versions: list[tuple[bytes, bytes, bytes | None]]) -> None:
        """Record rows' versions in the partition's history, with the stored value of
        each key that starts a chain: once restored, while consistent reads come."""
        history = st.history
        if history is None or not versions:
            return
        if st.restored and history.active():
            new = history.starting(k for k, _, _ in versions)
            before = dict(zip(new, self.stores[view].multi_get(p, new), strict=True)) \
                if new else {}
            history.record(versions, before)
        else:
            history.skip()

    def _fetched(self, topic: str, p: int) -> None:
        view = self._topic_view.get(topic)
        st = self.states.get((view, p)) if view is not None else None
        if st is not None:
            st.fetched = True

    def _skip(self, view: str, p: int, offset: int, reason: str, exc: Exception) -> None:
        self._skips_of(view).skip(reason, f"partition {p} offset {offset}: {str(exc)[:200]}")

    def _skips_of(self, view: str) -> Skips:
        skips = self._skips.get(view)
        if skips is None:
            skips = self._skips[view] = Skips(log, f"{view} changelog record")
        return skips

    def count_skips(self, view: str, skips: Counter[str], read: int) -> None:
        """A replay made elsewhere (``replayer.py``): its records read and skipped count
        as this node's."""
        self.read[view] += read
        if skips:
            held = self._skips_of(view)
            held.reasons.update(skips)
            held.total += skips.total()

    @property
    def skipped(self) -> int:
        """Changelog records skipped, in all."""
        return sum(s.total for s in list(self._skips.values()))

    @property
    def skips(self) -> Counter[tuple[str, str]]:
        """Changelog records skipped, by (view, reason)."""
        return Counter({(view, reason): n for view, s in list(self._skips.items())
                        for reason, n in s.reasons.items()})

    def _check(self, view: str) -> RowCheck:
        check = self._checks.get(view)
        if check is None:
            check = self._checks[view] = RowCheck(self.views[view], self.partitions.get(view))
        return check

    def _fresh(self, view: str, ts: bytes, appended: tuple[int, int]) -> None:
        """Observe a row's freshness and its stages (``appended``: the changelog record's
        (timestamp type, epoch ms), as confluent-kafka gives it; type 0: none)."""
        try:
            written = int(ts) / 1000
        except ValueError:
            return  # not a time: nothing to measure (the row itself was checked)
        now = time.time()
        self.freshness.observe((view,), max(now - written, 0.0))
        kind, ms = appended
        if kind and ms >= 0:
            at = ms / 1000
            self.stages.observe((view, "pipeline"), max(at - written, 0.0))
            self.stages.observe((view, "node"), max(now - at, 0.0))

    @staticmethod
    def _remember(st: PartitionState, rows: dict[bytes, bytes], marked: bool) -> None:
        """Keep the rows' positions; after a marker, only those it does not cover."""
        kept = st.rows
        for key, pos in rows.items():
            kept[key] = pos
            kept.move_to_end(key)  # the newest are kept longest
        if marked and kept:
            st.rows = kept = OrderedDict(
                (k, v) for k, v in kept.items() if not row_covered(v, st.position))
        # popitem from the front is O(1): deleting a plain dict's first key leaves a
        # hole that every next(iter()) scans past, a restore's quadratic (issue 49)
        while len(kept) > MAX_ROW_POSITIONS:
            kept.popitem(last=False)

    def _rebuild(self, view: str, p: int, st: PartitionState, seen: int) -> None:
        log.warning("%s partition %d: changelog restarted (offset %d is below checkpoint %d); "
                    "rebuilding the partition from the log", view, p, seen, st.offset)
        with self.feed.lock:
            self.stores[view].drop(p)
            st.offset, st.position, st.restored, st.target = 0, {}, False, -1
            st.restore_from, st.restore_bytes, st.started = 0, 0, time.monotonic()
            if st.history is not None:
                st.history.skip()
            self.feed.end(view, p, "the changelog restarted")
        st.rows = OrderedDict()

    def _refresh_watermarks(self, consumer: Any, assigned: set[tuple[str, int]]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        for v, p in assigned:
            st = self.states.get((v, p))
            if st is None or not st.fetched:
                continue
            try:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topics[v], p), cached=True)
            except Exception:
                continue
            if high is None or high < 0:
                continue
            if high < st.offset and (high := self._end(consumer, v, p, st.offset)) < st.offset:
                # the log is now shorter than our checkpoint (the cached end can lag the
                # records just handed over by one fetch: the broker is asked to be sure)
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
