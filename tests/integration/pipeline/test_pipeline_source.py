"""The streamiq-kafka source on the embedded broker: every option, exact offset ranges."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from streamiq.kafka.admin import ensure_topics
from streamiq.pipeline.kafka_io import DataLossError, EndProbe
from streamiq.pipeline.options import EARLIEST, OffsetJson, parse_options
from streamiq.pipeline.source import KafkaPartition, KafkaStreamReader

pytestmark = pytest.mark.integration


def stream_reader(bootstrap: str, **options: str) -> KafkaStreamReader:
    return KafkaStreamReader(parse_options(
        {"kafka.bootstrap.servers": bootstrap, **options}, True))


def read_all(reader: KafkaStreamReader, start: OffsetJson,
             end: OffsetJson) -> list[tuple[int, int]]:
    """(partition, offset) of every row the planned tasks return (as executors would)."""
    import pickle

    rows: list[tuple[int, int]] = []
    for part in reader.partitions(start, end):
        r = pickle.loads(pickle.dumps(reader))  # what Spark ships to executors
        for batch in r.read(part):
            d = batch.to_pydict()
            rows += list(zip(d["partition"], d["offset"], strict=True))
    return rows


def test_probe_is_exact_for_multi_record_batches(bootstrap: str, make_topic: Callable[..., str],
                                                 produce: Callable[..., None]) -> None:
    topic = make_topic(partitions=2)
    produce(topic, [f"v{i}" for i in range(1000)], partition=0, linger_ms=200)  # few batches
    produce(topic, ["x"] * 7, partition=1, linger_ms=200)
    probe = EndProbe(parse_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic},
                                   True))
    tps = probe.partitions()
    assert tps == [(topic, 0), (topic, 1)]
    assert probe.ends(tps) == {(topic, 0): 1000, (topic, 1): 7}
    produce(topic, ["y"] * 5, partition=1)
    assert probe.ends(tps) == {(topic, 0): 1000, (topic, 1): 12}
    probe.close()


def test_batch_read_starting_ending_offsets(spark: Any, bootstrap: str,
                                            make_topic: Callable[..., str],
                                            produce: Callable[..., None]) -> None:
    topic = make_topic(partitions=3)
    for p in range(3):
        produce(topic, [f"{p}-{i}" for i in range(100)], partition=p, linger_ms=200)
    def base() -> Any:
        return (spark.read.format("streamiq-kafka")
                .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic))

    df = base().load()
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType"]
    assert df.count() == 300
    rng = (base().option("startingOffsets", json.dumps({topic: {"0": 10, "1": -2, "2": 99}}))
           .option("endingOffsets", json.dumps({topic: {"0": 20, "1": 5, "2": -1}})).load())
    got = sorted((r.partition, r.offset, r.value.decode()) for r in rng.collect())
    want = ([(0, o, f"0-{o}") for o in range(10, 20)] + [(1, o, f"1-{o}") for o in range(5)]
            + [(2, 99, "2-99")])
    assert got == want
    row = rng.where("partition = 2").first()
    assert row.topic == topic and row.timestampType == 0 and row.timestamp is not None


def test_min_partitions_splits_ranges_without_losing_or_repeating(
        spark: Any, bootstrap: str, make_topic: Callable[..., str],
        produce: Callable[..., None]) -> None:
    topic = make_topic(partitions=1)
    produce(topic, [str(i) for i in range(10_000)], partition=0, linger_ms=100)
    df = (spark.read.format("streamiq-kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", topic).option("minPartitions", "2").load())
    assert df.rdd.getNumPartitions() == 2  # one Kafka partition, two Spark tasks
    got = [(r.offset, r.value.decode()) for r in df.select("offset", "value").collect()]
    assert sorted(got) == [(i, str(i)) for i in range(10_000)]


def test_invalid_option_fails_at_load_naming_it(spark: Any, bootstrap: str) -> None:
    from pyspark.errors import AnalysisException

    def r() -> Any:
        return spark.read.format("streamiq-kafka").option("kafka.bootstrap.servers", bootstrap)

    with pytest.raises(AnalysisException, match=r"'startingOffsets'.*yesterday"):
        r().option("subscribe", "x").option("startingOffsets", "yesterday").load()
    with pytest.raises(AnalysisException, match=r"no\.such\.prop"):
        r().option("subscribe", "x").option("kafka.no.such.prop", "1").load()
    with pytest.raises(AnalysisException, match="'subscribe'"):
        spark.readStream.format("streamiq-kafka").option(
            "kafka.bootstrap.servers", bootstrap).load()


def test_pattern_assign_headers(spark: Any, bootstrap: str, make_topic: Callable[..., str],
                                produce: Callable[..., None]) -> None:
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    a, b = make_topic(2, prefix), make_topic(1, prefix)
    other = make_topic(1, "other")
    produce(a, ["a"] * 4, headers=[("h1", b"v1"), ("h2", b"")])
    produce(b, ["b"] * 3)
    produce(other, ["o"] * 5)
    def base() -> Any:
        return spark.read.format("streamiq-kafka").option("kafka.bootstrap.servers", bootstrap)

    pat = base().option("subscribePattern", f"{prefix}-.*").option("includeHeaders", "true").load()
    rows = pat.collect()
    assert sorted(r.topic for r in rows) == sorted([a] * 4 + [b] * 3)
    ra = [r for r in rows if r.topic == a]
    assert all([(h.key, h.value) for h in r.headers] == [("h1", b"v1"), ("h2", b"")] for r in ra)
    assert all(r.headers == [] for r in rows if r.topic == b)
    produce(a, ["p0"] * 2, partition=0)
    produce(a, ["p1"] * 3, partition=1)
    asg = base().option("assign", json.dumps({a: [1], other: [0]})).load()
    got = sorted((r.topic, r.partition) for r in asg.collect())
    n_a1 = len([r for r in rows if r.topic == a and r.partition == 1]) + 3
    assert got == sorted([(a, 1)] * n_a1 + [(other, 0)] * 5)


def test_stream_max_offsets_per_trigger(spark: Any, bootstrap: str, tmp_path: Any,
                                        make_topic: Callable[..., str],
                                        produce: Callable[..., None]) -> None:
    topic = make_topic(partitions=3)
    produce(topic, [str(i) for i in range(90)], keys=[str(i) for i in range(90)])
    seen: list[tuple[int, int]] = []
    sizes: list[int] = []

    def collect(df: Any, batch_id: int) -> None:
        rows = [(r.partition, r.offset) for r in df.select("partition", "offset").collect()]
        sizes.append(len(rows))
        seen.extend(rows)

    q = (spark.readStream.format("streamiq-kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("startingOffsets", "earliest")
         .option("maxOffsetsPerTrigger", "25").load()
         .writeStream.foreachBatch(collect).trigger(availableNow=True)
         .option("checkpointLocation", str(tmp_path / "ck")).start())
    q.awaitTermination(120)
    assert q.exception() is None
    assert len(seen) == 90 and len(set(seen)) == 90  # every record exactly once
    assert max(sizes) <= 25 and sum(1 for s in sizes if s) >= 4


def test_stream_reader_exact_ranges_and_starting_offsets(
        bootstrap: str, make_topic: Callable[..., str], produce: Callable[..., None]) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    topic = make_topic(partitions=2)
    produce(topic, ["a"] * 50, partition=0, linger_ms=200)
    latest = stream_reader(bootstrap, subscribe=topic)
    assert latest.initialOffset() == {topic: {"0": 50, "1": 0}}
    earliest = stream_reader(bootstrap, subscribe=topic, startingOffsets="earliest")
    start = earliest.initialOffset()
    assert start == {topic: {"0": EARLIEST, "1": EARLIEST}}
    end = earliest.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 50, "1": EARLIEST}}
    assert read_all(earliest, start, end) == [(0, o) for o in range(50)]
    assert earliest.latestOffset(end, ReadAllAvailable()) == end  # nothing new: no batch
    produce(topic, ["b"] * 30, partition=1, linger_ms=200)
    end2 = earliest.latestOffset(end, ReadAllAvailable())
    assert end2 == {topic: {"0": 50, "1": 30}}
    assert read_all(earliest, end, end2) == [(1, o) for o in range(30)]
    # a replayed batch plans the identical ranges
    assert [p.value for p in earliest.partitions(end, end2)] == [
        p.value for p in earliest.partitions(end, end2)]
    spec = stream_reader(bootstrap, subscribe=topic,
                         startingOffsets=json.dumps({topic: {"0": 45, "1": -1}}))
    s = spec.initialOffset()
    assert s == {topic: {"0": 45, "1": 30}}
    assert read_all(spec, s, spec.latestOffset(s, ReadAllAvailable())) == [
        (0, o) for o in range(45, 50)]
    for r in (latest, earliest, spec):
        r.stop()


def test_added_partitions_and_fail_on_data_loss(bootstrap: str, produce: Callable[..., None]
                                                ) -> None:
    """The topic deleted and re-created with more partitions: the old offsets are lost
    (an error, or skipped when failOnDataLoss is false), the new partitions read from 0."""
    from confluent_kafka.admin import AdminClient
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    topic = f"grow-{uuid.uuid4().hex[:8]}"
    conf: dict[str, str | int | float | bool] = {"bootstrap.servers": bootstrap}
    ensure_topics(conf, {topic: 2})
    produce(topic, ["x"] * 10, partition=0)
    produce(topic, ["x"] * 10, partition=1)
    strict = stream_reader(bootstrap, subscribe=topic, startingOffsets="earliest")
    lenient = stream_reader(bootstrap, subscribe=topic, startingOffsets="earliest",
                            failOnDataLoss="false")
    start = {topic: {"0": 10, "1": 10}}  # both have read everything
    assert strict.latestOffset(start, ReadAllAvailable()) == start
    # librdkafka 2.16 can crash when a topic its (idle) consumer knew is deleted and
    # re-created: drop the probe across the deletion (a fresh one is made lazily)
    strict.stop()
    admin = AdminClient(conf)
    admin.delete_topics([topic])[topic].result(10)
    ensure_topics(conf, {topic: 4})
    produce(topic, ["y"] * 3, partition=0)
    produce(topic, ["z"] * 2, partition=3)
    with pytest.raises(DataLossError, match=f"{topic}-0.*failOnDataLoss"):
        strict.latestOffset(start, ReadAllAvailable())
    end = lenient.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 3, "1": 0, "2": 0, "3": 2}}
    # the lost ranges are skipped, the new partitions are read from the beginning
    parts = lenient.partitions(start, end)
    assert [(p.partition, p.start, p.end) for p in parts if isinstance(p, KafkaPartition)] == [
        (3, 0, 2)]
    assert read_all(lenient, start, end) == [(3, 0), (3, 1)]
    strict.stop()
    lenient.stop()
