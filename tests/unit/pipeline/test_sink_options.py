"""Sink option validation on the driver: every error names its option (no Spark, no broker)."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.sql.types import (
    DateType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streamiq.pipeline.sink_options import check_output_mode, parse_sink_options

WINDOW = StructType([StructField("start", TimestampType()), StructField("end", TimestampType())])
SCHEMA = StructType([StructField("user_id", StringType()), StructField("day", DateType()),
                     StructField("n", LongType()), StructField("score", DoubleType()),
                     StructField("seen", TimestampType()), StructField("window", WINDOW)])
BASE = {"view": "page_views", "key": "user_id", "kafka.bootstrap.servers": "h:1",
        "checkpointLocation": "/ck"}


def parse(schema: StructType | None = SCHEMA, **kw: Any) -> Any:
    opts = {k: v for k, v in {**BASE, **kw}.items() if v is not None}
    return parse_sink_options(opts, schema)


def test_defaults() -> None:
    o = parse()
    assert o.view == "page_views" and o.key == ("user_id",) and o.kafka == {
        "bootstrap.servers": "h:1"}
    assert o.cluster == "streamiq" and o.topic_prefix == "" and not o.is_global
    assert o.partitions is None and o.checkpoint == "/ck"
    assert o.changelog_topic == "page_views-changelog"
    assert o.catalog_topic == "_streamiq-streamiq-catalog"


def test_names_are_case_insensitive_and_prefix_applies_to_both_topics() -> None:
    o = parse_sink_options({"VIEW": "v", "Key": "user_id, day", "kafka.bootstrap.servers": "h:1",
                            "topicprefix": "t.", "CLUSTER": "c1", "Global": "TRUE",
                            "partitions": "6", "kafka.security.protocol": "SSL"}, SCHEMA)
    assert o.key == ("user_id", "day") and o.is_global and o.partitions == 6
    assert o.changelog_topic == "t.v-changelog" and o.catalog_topic == "t._streamiq-c1-catalog"
    assert o.kafka == {"bootstrap.servers": "h:1", "security.protocol": "SSL"}


@pytest.mark.parametrize(("kw", "option"), [
    ({"view": None}, "'view'"),
    ({"view": "bad name"}, "'view'"),
    ({"view": "a/b"}, "'view'"),
    ({"key": None}, "'key'"),
    ({"key": "user_id,,day"}, "'key'"),
    ({"key": "nope"}, "'key': column 'nope' is not in the data frame"),
    ({"key": "user_id,user_id"}, "'key'"),
    ({"key": "score"}, "'key': column 'score' has type double"),
    ({"key": "seen"}, "'key': column 'seen' has type timestamp"),
    ({"key": "window"}, "'key': 'window' cannot be a key column"),
    ({"kafka.bootstrap.servers": None}, "'kafka.bootstrap.servers'"),
    ({"partitions": "0"}, "'partitions' must be a positive integer"),
    ({"partitions": "-2"}, "'partitions' must be a positive integer"),
    ({"partitions": "three"}, "'partitions' must be a positive integer"),
    ({"cluster": "a b"}, "'cluster'"),
    ({"topicPrefix": "x/"}, "'topicPrefix'"),
    ({"global": "yes"}, "'global'"),
    ({"keys": "user_id"}, "'keys'"),
    ({"subscribe": "t"}, "'subscribe'"),
    ({"ticks": "a b"}, "'ticks': 'a b' is not a Kafka topic name"),
])
def test_bad_options_are_named(kw: dict[str, Any], option: str) -> None:
    with pytest.raises(ValueError, match="option " + option):
        parse(**kw)


def test_key_columns_are_checked_only_against_a_schema() -> None:
    assert parse(None, key="anything").key == ("anything",)


def test_window_struct_and_bounds_together_are_refused() -> None:
    both = StructType([StructField("k", StringType()), StructField("window", WINDOW),
                       StructField("window_start", LongType())])
    with pytest.raises(ValueError, match="keep one form"):
        parse(both, key="k")


@pytest.mark.parametrize("mode", ["update", "Append", " update "])
def test_output_modes(mode: str) -> None:
    assert check_output_mode(mode) in ("update", "append")


def test_complete_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="outputMode 'complete'"):
        check_output_mode("complete")
