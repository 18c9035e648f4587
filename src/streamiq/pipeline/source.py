"""``streamiq-kafka``: a pure-Python Spark data source with the built-in ``kafka`` contract.

Same option names and output columns as Spark's ``kafka`` format (whose JVM jars are not
available here), for batch and streaming reads::

    spark.readStream.format("streamiq-kafka")
        .option("kafka.bootstrap.servers", "127.0.0.1:9092")
        .option("subscribe", "bank-transactions")
        .option("startingOffsets", "earliest")
        .load()

Streaming offsets are ``{topic: {"partition": next_offset}}`` (Spark's JSON form; ``-2``
= earliest, only ever in an initial offset). Every micro-batch reads exactly
``[start, end)`` per partition, so a batch replayed after a crash reads the same records.
Reads are Arrow record batches built per fetched chunk.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from streamiq.pipeline.kafka_io import DataLossError, EndProbe, read_range
from streamiq.pipeline.options import (
    EARLIEST,
    LATEST,
    TP,
    KafkaOptions,
    OffsetJson,
    Offsets,
    offsets_from_json,
    parse_options,
)

__all__ = [
    "FORMAT",
    "KafkaBatchReader",
    "KafkaDataSource",
    "KafkaPartition",
    "KafkaStreamReader",
    "rate_limit",
    "schema_ddl",
    "split_ranges",
    "to_offset_dict",
]

log = logging.getLogger(__name__)

FORMAT = "streamiq-kafka"


def schema_ddl(include_headers: bool) -> str:
    """The kafka format's columns, as Spark DDL."""
    ddl = ("key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
           "timestamp TIMESTAMP, timestampType INT")
    if include_headers:
        ddl += ", headers ARRAY<STRUCT<key: STRING, value: BINARY>>"
    return ddl


def to_offset_dict(offsets: Mapping[TP, int]) -> OffsetJson:
    """``{(t, p): o}`` -> the JSON-serialisable offset dict Spark checkpoints."""
    out: OffsetJson = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def rate_limit(start: Mapping[TP, int], end: Mapping[TP, int], max_rows: int,
               low: Mapping[TP, int]) -> Offsets:
    """Cap ``end`` so at most about ``max_rows`` records are read, prorated like Spark does."""
    begin = {tp: low.get(tp, 0) if start.get(tp, EARLIEST) == EARLIEST else start[tp]
             for tp in end}
    sizes = {tp: e - begin[tp] for tp, e in end.items()}
    total = sum(s for s in sizes.values() if s > 0)
    if total <= max_rows:
        return dict(end)
    out: Offsets = {}
    budget = max_rows
    for tp, e in sorted(end.items()):
        size = sizes[tp]
        if size <= 0:
            out[tp] = e
            continue
        take = min(int(max_rows * size / total), budget)
        budget -= take
        out[tp] = begin[tp] + take
    # hand the rounding remainder out in partition order so progress is always made
    for tp in sorted(out):
        if budget <= 0:
            break
        room = end[tp] - out[tp]
        extra = min(room, budget)
        out[tp] += extra
        budget -= extra
    return out


#: ``minPartitions`` never cuts a range into pieces shorter than this: a Spark task
#: costs more than reading a few thousand records.
MIN_SPLIT = 4096


def split_ranges(ranges: Sequence[tuple[TP, int, int]], min_partitions: int | None,
                 min_split: int = MIN_SPLIT) -> list[tuple[TP, int, int]]:
    """Spark's ``minPartitions``: cut ``(tp, start, end)`` ranges into about
    ``min_partitions`` pieces, each range in proportion to its share of all offsets.

    Ranges already at least as many as asked for are returned as they are, and a range
    is never cut into pieces shorter than ``min_split`` offsets.
    """
    if not min_partitions or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(e - s for _, s, e in ranges)
    out: list[tuple[TP, int, int]] = []
    for tp, s, e in ranges:
        size = e - s
        pieces = max(1, min(round(size / total * min_partitions), size // min_split))
        for i in range(pieces):  # contiguous, sizes differ by at most one
            out.append((tp, s + size * i // pieces, s + size * (i + 1) // pieces))
    return out


class KafkaPartition(InputPartition):
    """One Spark task: offsets ``[start, end)`` of one topic partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end


class _Reader:
    """Shared by the batch and stream readers; holds no client when pickled."""

    def __init__(self, opts: KafkaOptions) -> None:
        self.opts = opts
        self._probe: EndProbe | None = None

    @property
    def probe(self) -> EndProbe:
        if self._probe is None:
            self._probe = EndProbe(self.opts)
        return self._probe

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_probe"] = None
        return state

    def _resolve_start(self, tp: TP, offset: int) -> int:
        return self.probe.low(tp) if offset == EARLIEST else offset

    def _lost(self, msg: str) -> None:
        if self.opts.fail_on_data_loss:
            raise DataLossError(msg + ". Set the source option failOnDataLoss=false to go on.")
        log.warning("%s (failOnDataLoss=false: continuing)", msg)

    def _plan(self, start: Mapping[TP, int], end: Mapping[TP, int]) -> list[KafkaPartition]:
        ranges: list[tuple[TP, int, int]] = []
        for tp, e in sorted(end.items()):
            if e == EARLIEST:  # still nothing read from an initially empty partition
                continue
            s = self._resolve_start(tp, start.get(tp, EARLIEST))
            if e < s:
                self._lost(f"{tp[0]}-{tp[1]}: offset went back from {s} to {e}; some data "
                           "may have been lost")
                continue
            if e > s:
                ranges.append((tp, s, e))
        return [KafkaPartition(tp[0], tp[1], s, e)
                for tp, s, e in split_ranges(ranges, self.opts.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, KafkaPartition):
            return  # an empty plan: Spark reads one placeholder partition, it holds nothing
        o = self.opts
        yield from read_range(o.kafka, partition.topic, partition.partition, partition.start,
                              partition.end, o.fail_on_data_loss, o.include_headers,
                              o.poll_timeout_ms)

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None


class KafkaBatchReader(_Reader, DataSourceReader):
    """Batch read of ``[startingOffsets, endingOffsets)``."""

    def partitions(self) -> Sequence[InputPartition]:
        tps = self.probe.partitions()
        starting, ending = self.opts.starting, self.opts.ending
        start: Offsets = {}
        for tp in tps:
            s = starting.get(tp, EARLIEST) if isinstance(starting, dict) else EARLIEST
            start[tp] = s
        need_end = [tp for tp in tps if not isinstance(ending, dict)
                    or ending.get(tp, LATEST) == LATEST]
        ends = self.probe.ends(need_end) if need_end else {}
        end: Offsets = {}
        for tp in tps:
            e = ending.get(tp, LATEST) if isinstance(ending, dict) else LATEST
            end[tp] = ends[tp] if e == LATEST else e
        try:
            return self._plan(start, end)
        finally:
            self.close()


class KafkaStreamReader(_Reader, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reads; lives in Spark's driver-side Python source runner between calls."""

    def __init__(self, opts: KafkaOptions) -> None:
        super().__init__(opts)
        self._target: Offsets | None = None
        self._latest: Offsets = {}

    def initialOffset(self) -> OffsetJson:
        tps = self.probe.partitions()
        spec = self.opts.starting
        offs: Offsets = {}
        if spec == "earliest":
            offs = dict.fromkeys(tps, EARLIEST)
        elif spec == "latest":
            offs = self.probe.ends(tps)
        else:
            assert isinstance(spec, dict)
            latest = [tp for tp in tps if spec.get(tp, LATEST) == LATEST]
            ends = self.probe.ends(latest) if latest else {}
            for tp in sorted(set(tps) | set(spec)):
                o = spec.get(tp, LATEST)
                offs[tp] = ends.get(tp, 0) if o == LATEST else o
        return to_offset_dict(offs)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.probe.partitions()
        self._target = self.probe.ends(tps)

    def latestOffset(self, start: OffsetJson, limit: ReadLimit) -> OffsetJson:
        pause = self.opts.pause_when_exists
        if pause is not None and os.path.exists(pause):
            return start  # paused (the pipeline is stopping): no new micro-batch
        st = offsets_from_json(start, "start offset")
        if self._target is not None:
            end = dict(self._target)
        else:
            tps = self.probe.partitions()
            end = self.probe.ends(tps, hint=st)
        for tp in sorted(set(st) - set(end)):
            self._lost(f"{tp[0]}-{tp[1]} is gone (topic or partition deleted)")
        for tp, e in sorted(end.items()):
            s = st.get(tp, EARLIEST)
            if s >= 0 and e < s:
                self._lost(f"{tp[0]}-{tp[1]}: end offset {e} is before the committed offset "
                           f"{s}; some data may have been lost")
        self._latest = dict(end)
        if isinstance(limit, ReadMaxRows):
            lows = {tp: self.probe.low(tp) for tp in end if st.get(tp, EARLIEST) == EARLIEST}
            end = rate_limit(st, end, limit.max_rows, lows)
        if self.opts.empty_first_batch and all(s == EARLIEST for s in st.values()):
            return to_offset_dict(end)  # a new query: its first batch now, even if empty
        # a start that is still EARLIEST with nothing to read stays EARLIEST (no spurious batch)
        for tp, s in st.items():
            if s == EARLIEST and tp in end and end[tp] == self.probe.low(tp):
                end[tp] = EARLIEST
        return to_offset_dict(end)

    def reportLatestOffset(self) -> OffsetJson | None:
        return to_offset_dict(self._latest) if self._latest else None

    def partitions(self, start: OffsetJson, end: OffsetJson) -> Sequence[InputPartition]:
        return self._plan(offsets_from_json(start, "start offset"),
                          offsets_from_json(end, "end offset"))

    def commit(self, end: OffsetJson) -> None:
        pass

    def stop(self) -> None:
        self.close()


class KafkaDataSource(DataSource):
    """Spark's ``kafka`` source contract, in Python. Format name ``streamiq-kafka``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _options(self, streaming: bool | None) -> KafkaOptions:
        return parse_options(dict(self.options), streaming)

    def schema(self) -> str:
        opts = self._options(None)  # fails at load(), naming the option
        _check_client_config(opts)
        return schema_ddl(opts.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(self._options(False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self._options(True))


def _check_client_config(opts: KafkaOptions) -> None:
    """Reject kafka.* settings librdkafka does not know, naming them."""
    from confluent_kafka import Consumer, KafkaException

    try:
        Consumer({**opts.kafka, "group.id": "streamiq-check"}).close()
    except (KafkaException, ValueError, TypeError) as exc:
        raise ValueError(f"invalid kafka.* option: {exc}") from None
