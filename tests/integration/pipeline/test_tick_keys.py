"""Crafted tick keys land where they were crafted for: Spark's shuffle (HashPartitioning
over the group keys, as the aggregation's exchange) sends each to its task, and Kafka's
partitioner puts its row in its changelog partition (pipeline/ticks.py)."""

from __future__ import annotations

from typing import Any

import pytest

from streamiq.kafka.partitioner import partition_for
from streamiq.pipeline.ticks import craft_keys
from streamiq.views.base import KEY_SEP
from streamiq.views.orders import ORDER_COUNTS

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(("tasks", "partitions"), [(3, 3), (4, 6)])
def test_each_key_reaches_its_task_and_partition(spark: Any, tasks: int, partitions: int
                                                 ) -> None:
    from pyspark.sql import functions as F

    keys = craft_keys(ORDER_COUNTS, tasks, partitions)
    assert len(keys) == tasks * partitions and len(set(keys)) == len(keys)
    df = spark.createDataFrame(keys, "store string, type string")
    got = df.repartition(tasks, "store", "type").select(
        "store", "type", F.spark_partition_id().alias("task")).collect()
    assert len(got) == len(keys)
    for row in got:
        task, part = (int(x) for x in row["store"][len("~tick~"):].split(".")[:2])
        assert row["task"] == task, row
        assert partition_for(KEY_SEP.join((row["store"], row["type"])).encode(),
                             partitions) == part, row
    assert {(i // partitions, i % partitions) for i in range(len(keys))} == {
        tuple(int(x) for x in k[0][len("~tick~"):].split(".")[:2]) for k in keys}
