"""Spark's Kafka sink, given no partition column, places each record where the nodes look
for it: the Java producer's default partitioner is murmur2 over the key bytes, which
``kafka/partitioner.py`` computes (and librdkafka's ``murmur2_random``)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from pipeline_harness import read_topic

from streamiq.kafka.partitioner import partition_for

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("partitions", [3, 7])
def test_spark_kafka_sink_partitions_keys_as_the_nodes_do(spark: Any, bootstrap: str,
                                                          make_topic: Any,
                                                          partitions: int) -> None:
    rng = random.Random(partitions)
    keys = [f"acct-{i}" for i in range(500)] + [
        "é|ü|✓", "store-9|GENERAL", "a" * 1000, " ", "0", "-1", "\u0000x"] + [
        "".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randrange(1, 40)))
        for _ in range(500)]
    keys = [k for k in dict.fromkeys(keys) if not 0xD800 <= max(map(ord, k)) < 0xE000]
    topic = make_topic(partitions, "sinkpart")
    df = spark.createDataFrame([(k, "v") for k in keys], "key STRING, value STRING")
    df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap) \
        .option("topic", topic).save()
    got = {m.key().decode(): m.partition() for m in read_topic(bootstrap, topic)}
    assert len(got) == len(keys)
    wrong = {k: p for k, p in got.items() if p != partition_for(k.encode(), partitions)}
    assert wrong == {}
    assert len(set(got.values())) == partitions  # every partition used: not all in one
