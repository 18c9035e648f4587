"""Kafka I/O of the source: the driver-side end-offset probe and the executor-side reader.

End offsets come from ListOffsets (one request per partition leader for all the
partitions asked, through the admin client): the high watermark, so a batch never reads
past what every in-sync replica has.

``confluent_kafka`` is imported inside functions: these objects are pickled to Spark
workers and clients are created lazily where they run.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from streamiq.pipeline.options import TP, KafkaOptions, Offsets

if TYPE_CHECKING:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

__all__ = [
    "PROBE_DEFAULTS", "READER_DEFAULTS", "DataLossError", "EndProbe", "arrow_schema",
    "close_readers", "read_range",
]

log = logging.getLogger(__name__)

#: librdkafka settings of the driver-side probe (user ``kafka.*`` options override them).
PROBE_DEFAULTS: dict[str, Any] = {
    "enable.auto.commit": False, "auto.offset.reset": "earliest",
    "topic.metadata.refresh.interval.ms": 5000,
}
#: librdkafka settings of executor readers (the broker answers a fetch as soon as it has
#: data: no fetch-timing settings are needed for latency).
READER_DEFAULTS: dict[str, Any] = {
    "enable.partition.eof": False, "enable.auto.commit": False,
    "enable.auto.offset.store": False, "auto.offset.reset": "error",
    "isolation.level": "read_uncommitted", "queued.max.messages.kbytes": 32768,
}


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (and ``failOnDataLoss`` is true)."""


def _client_conf(defaults: Mapping[str, Any], kafka: Mapping[str, str], role: str
                 ) -> dict[str, Any]:
    conf: dict[str, Any] = dict(defaults)
    conf["group.id"] = f"streamiq-{role}-{uuid.uuid4().hex[:8]}"
    conf["client.id"] = f"streamiq-{role}"
    conf.update(kafka)
    for k in ("auto.offset.reset", "enable.auto.commit"):  # managed here, never by the user
        conf[k] = defaults[k]
    return conf


class EndProbe:
    """Driver-side view of the subscribed partitions and their exact end offsets."""

    def __init__(self, opts: KafkaOptions, timeout: float = 5.0) -> None:
        self.opts = opts
        self.timeout = timeout
        self._consumer: Consumer | None = None
        self._admin: AdminClient | None = None
        self._ends: Offsets = {}  # last probed high watermark per partition
        self._lows: Offsets = {}
        self._parts: list[TP] | None = None  # the partitions the last metadata named
        self.metadata_timeouts = 0

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(_client_conf(PROBE_DEFAULTS, self.opts.kafka, "probe"))
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        self._admin = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_consumer"] = state["_admin"] = None
        return state

    def partitions(self) -> list[TP]:
        """Partitions this source reads now (added partitions appear here). When Kafka
        does not answer the metadata request in time, the partitions it named last time
        (this trigger's batch then ends where the known partitions end, and the next
        trigger asks again); only a first request that fails raises."""
        from confluent_kafka import KafkaException

        if self.opts.assign:
            return list(self.opts.assign)
        try:
            md = self.consumer.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            if self._parts is None:
                raise
            self.metadata_timeouts += 1
            n = self.metadata_timeouts
            if n & (n - 1) == 0:  # the 1st, 2nd, 4th, 8th...: an outage is not a flood
                log.warning("Kafka metadata unanswered (%s): reading the %d partitions "
                            "known (%d times so far)", exc.args[0], len(self._parts), n)
            return list(self._parts)
        pat = re.compile(self.opts.pattern) if self.opts.pattern is not None else None
        out: list[TP] = []
        for name, tmd in md.topics.items():
            if tmd.error is not None and not tmd.partitions:
                continue
            if (name in self.opts.subscribe if pat is None else pat.fullmatch(name)
                    and not name.startswith("__")):
                out.extend((name, p) for p in tmd.partitions)
        self._parts = sorted(out)
        return list(self._parts)

    def low(self, tp: TP) -> int:
        """Earliest offset (ListOffsets), remembered: only retention moves it."""
        lo = self._lows.get(tp, -1)
        if lo < 0:
            from confluent_kafka import TopicPartition

            lo, _ = self.consumer.get_watermark_offsets(TopicPartition(*tp), timeout=self.timeout)
            self._lows[tp] = lo
        return max(lo, 0)

    def ends(self, tps: list[TP], hint: Mapping[TP, int] | None = None) -> Offsets:
        """High watermark of each partition (ListOffsets latest); one that does not answer
        keeps the end known before (``hint``, else the last probe's)."""
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
        from confluent_kafka.admin import AdminClient, OffsetSpec

        if not tps:
            return {}
        if self._admin is None:
            self._admin = AdminClient({k: v for k, v in _client_conf(
                PROBE_DEFAULTS, self.opts.kafka, "probe").items()
                if k not in ("group.id", "enable.auto.commit", "auto.offset.reset")})
        asked = {TopicPartition(t, p): OffsetSpec.latest() for t, p in tps}
        futures = self._admin.list_offsets(asked, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                           request_timeout=self.timeout)
        out: Offsets = {}
        for tp, fut in futures.items():
            key = (tp.topic, tp.partition)
            try:
                out[key] = fut.result().offset
            except KafkaException as exc:
                out[key] = self._ends.get(key, (hint or {}).get(key, 0))
                log.warning("probe: no end offset for %s-%d (%s): keeping %d", *key, exc,
                            out[key])
        self._ends.update(out)
        return out


def arrow_schema(include_headers: bool) -> Any:
    """Arrow schema matching Spark's kafka source columns."""
    import pyarrow as pa

    fields = [
        pa.field("key", pa.binary()), pa.field("value", pa.binary()),
        pa.field("topic", pa.string()), pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()), pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", pa.list_(pa.struct(
            [pa.field("key", pa.string()), pa.field("value", pa.binary())]))))
    return pa.schema(fields)


_CONSUMERS: dict[tuple[tuple[str, str], ...], Any] = {}
# librdkafka timestamp types -> Java TimestampType ids (NO_TIMESTAMP=-1, CREATE=0, APPEND=1)
_TS_TYPE = {0: -1, 1: 0, 2: 1}


def _reader(kafka: Mapping[str, str]) -> Any:
    """One pooled consumer per worker process and configuration (workers are reused)."""
    from confluent_kafka import Consumer

    key = tuple(sorted(kafka.items()))
    c = _CONSUMERS.get(key)
    if c is None:
        c = _CONSUMERS[key] = Consumer(_client_conf(READER_DEFAULTS, kafka, "reader"))
    return c


def close_readers() -> None:
    """Close this process's pooled reader consumers. A Spark worker keeps them for its
    life; a process that read in-process (a test) closes them before its broker goes,
    or librdkafka retries the gone broker while the interpreter exits."""
    while _CONSUMERS:
        _, c = _CONSUMERS.popitem()
        c.close()


def _batch(msgs: list[Any], topic: str, partition: int, headers: bool, schema: Any) -> Any:
    import numpy as np
    import pyarrow as pa

    n = len(msgs)
    ts = [m.timestamp() for m in msgs]
    cols = [
        pa.array([m.key() for m in msgs], pa.binary()),
        pa.array([m.value() for m in msgs], pa.binary()),
        pa.array([topic] * n, pa.string()),
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array([m.offset() for m in msgs], pa.int64()),
        pa.array(np.fromiter((t[1] for t in ts), np.int64, n) * 1000,
                 pa.timestamp("us", tz="UTC")),
        pa.array([_TS_TYPE.get(t[0], -1) for t in ts], pa.int32()),
    ]
    if headers:
        cols.append(pa.array([[{"key": k, "value": v} for k, v in (m.headers() or ())]
                              for m in msgs], schema.field("headers").type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def _skip_lost(c: Consumer, topic: str, partition: int, nxt: int, end: int,
               fail_on_data_loss: bool) -> int | None:
    """Offsets from ``nxt`` are gone (retention, deleted records): raise ``DataLossError``
    or, with failOnDataLoss=false, resume at the earliest offset left (None: none of
    [nxt, end) is left)."""
    from confluent_kafka import TopicPartition

    lo, _ = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    msg = (f"{topic}-{partition}: offsets [{nxt}, {end}) are no longer available (earliest "
           f"is {lo}); some data may have been lost")
    if fail_on_data_loss:
        raise DataLossError(msg + ". Set failOnDataLoss=false to skip it.")
    log.warning(msg)
    if lo >= end:
        return None
    resumed = max(lo, nxt)
    c.assign([TopicPartition(topic, partition, resumed)])
    return resumed


def read_range(kafka: Mapping[str, str], topic: str, partition: int, start: int, end: int,
               fail_on_data_loss: bool, include_headers: bool, poll_timeout_ms: int,
               chunk: int = 20_000) -> Iterator[Any]:
    """Yield Arrow record batches of offsets [start, end) of one partition (executor side)."""
    from confluent_kafka import KafkaError, TopicPartition

    schema = arrow_schema(include_headers)
    if start < 0:
        raise ValueError(f"{topic}-{partition}: unresolved start offset {start}")
    if end <= start:
        return
    c = _reader(kafka)
    c.assign([TopicPartition(topic, partition, start)])
    nxt = start
    idle_deadline = time.monotonic() + poll_timeout_ms / 1000
    try:
        while nxt < end:
            want = min(chunk, end - nxt)
            msgs = c.consume(want, timeout=0.5)
            good = []
            for m in msgs:
                err = m.error()
                if err is None:
                    good.append(m)
                    continue
                if err.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                    resumed = _skip_lost(c, topic, partition, nxt, end, fail_on_data_loss)
                    if resumed is None:
                        return
                    nxt = resumed
                    break
                if err.code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(f"{topic}-{partition}: {err}")
            if good:
                if good[0].offset() > nxt:
                    msg = (f"{topic}-{partition}: expected offset {nxt}, got "
                           f"{good[0].offset()}; records may have been deleted")
                    if fail_on_data_loss and good[0].offset() < end:
                        raise DataLossError(msg + ". Set failOnDataLoss=false to skip it.")
                if good[-1].offset() >= end:
                    good = [m for m in good if m.offset() < end]
                if good:
                    nxt = good[-1].offset() + 1
                    yield _batch(good, topic, partition, include_headers, schema)
                idle_deadline = time.monotonic() + poll_timeout_ms / 1000
            if nxt < end and not good:
                pos = c.position([TopicPartition(topic, partition)])[0].offset
                if pos >= end:  # compacted / transactional gap up to the end
                    return
                if time.monotonic() > idle_deadline:
                    msg = (f"{topic}-{partition}: no records for {poll_timeout_ms} ms while "
                           f"reading offsets [{nxt}, {end})")
                    if fail_on_data_loss:
                        raise DataLossError(msg)
                    log.warning(msg)
                    return
    finally:
        c.unassign()
