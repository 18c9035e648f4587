"""Source option validation (driver side, no broker) and offset JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streamiq.pipeline.options import (
    EARLIEST,
    LATEST,
    offsets_from_json,
    offsets_to_json,
    parse_options,
)
from streamiq.pipeline.source import rate_limit, schema_ddl, to_offset_dict

BASE = {"kafka.bootstrap.servers": "h:1", "subscribe": "a"}


def opts(streaming: bool | None = True, **kw: Any) -> Any:
    return parse_options({**BASE, **kw}, streaming)


def test_defaults_match_spark() -> None:
    s = opts(True)
    assert s.starting == "latest" and s.fail_on_data_loss and not s.include_headers
    b = opts(False)
    assert b.starting == "earliest" and b.ending == "latest"
    assert s.kafka == {"bootstrap.servers": "h:1"}


@pytest.mark.parametrize(("options", "streaming", "named"), [
    ({"kafka.bootstrap.servers": "h:1"}, True, "subscribe"),
    ({"subscribe": "a"}, True, "kafka.bootstrap.servers"),
    ({**BASE, "assign": '{"a":[0]}'}, True, "assign"),
    ({**BASE, "startingOffsets": "soon"}, True, "startingOffsets"),
    ({**BASE, "startingOffsets": "{not json"}, True, "startingOffsets"),
    ({**BASE, "startingOffsets": '{"a": {"0": "x"}}'}, True, "startingOffsets"),
    ({**BASE, "startingOffsets": "latest"}, False, "startingOffsets"),
    ({**BASE, "endingOffsets": "earliest"}, False, "endingOffsets"),
    ({**BASE, "endingOffsets": '{"a": {"0": -2}}'}, False, "endingOffsets"),
    ({**BASE, "endingOffsets": "latest"}, True, "endingOffsets"),
    ({**BASE, "maxOffsetsPerTrigger": "0"}, True, "maxOffsetsPerTrigger"),
    ({**BASE, "maxOffsetsPerTrigger": "ten"}, True, "maxOffsetsPerTrigger"),
    ({**BASE, "maxOffsetsPerTrigger": "10"}, False, "maxOffsetsPerTrigger"),
    ({**BASE, "failOnDataLoss": "maybe"}, True, "failOnDataLoss"),
    ({**BASE, "includeHeaders": "yes"}, True, "includeHeaders"),
    ({**BASE, "kafka.auto.offset.reset": "earliest"}, True, "kafka.auto.offset.reset"),
    ({**BASE, "kafka.enable.auto.commit": "true"}, True, "kafka.enable.auto.commit"),
    ({**BASE, "subscribe": " , "}, True, "subscribe"),
    ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "("}, True, "subscribePattern"),
    ({"kafka.bootstrap.servers": "h:1", "assign": '{"a": [-1]}'}, True, "assign"),
    ({"kafka.bootstrap.servers": "h:1", "assign": '["a"]'}, True, "assign"),
    ({**BASE, "startingOffsetsByTimestamp": "{}"}, True, "startingoffsetsbytimestamp"),
    ({**BASE, "startingOffset": "earliest"}, True, "startingoffset"),
])
def test_invalid_options_name_the_option(options: dict[str, str], streaming: bool,
                                         named: str) -> None:
    with pytest.raises(ValueError, match=f"'{named}'"):
        parse_options(options, streaming)


def test_option_names_are_case_insensitive_and_kafka_passthrough() -> None:
    o = parse_options({"KAFKA.bootstrap.servers": "h:1", "SUBSCRIBE": "a,b",
                       "StartingOffsets": "EARLIEST", "kafka.security.protocol": "SASL_SSL",
                       "kafka.sasl.mechanism": "PLAIN", "maxoffsetspertrigger": "7"}, True)
    assert o.subscribe == ("a", "b") and o.starting == "earliest"
    assert o.kafka == {"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL",
                       "sasl.mechanism": "PLAIN"}
    assert o.max_offsets_per_trigger == 7


def test_assign_and_pattern() -> None:
    o = parse_options({"kafka.bootstrap.servers": "h:1", "assign": '{"a": [1, 0], "b": [2]}',
                       "startingOffsets": '{"a": {"0": 5}}'}, True)
    assert o.assign == (("a", 0), ("a", 1), ("b", 2))
    assert o.starting == {("a", 0): 5}
    assert o.matches("a") and not o.matches("c")
    with pytest.raises(ValueError, match=r"'startingOffsets'.*not in 'assign'"):
        parse_options({"kafka.bootstrap.servers": "h:1", "assign": '{"a": [0]}',
                       "startingOffsets": '{"a": {"3": 5}}'}, True)
    p = parse_options({"kafka.bootstrap.servers": "h:1", "subscribePattern": "in-.*"}, True)
    assert p.matches("in-x") and not p.matches("out-in-x")


def test_mode_unknown_at_load() -> None:
    assert parse_options({**BASE, "endingOffsets": '{"a": {"0": 3}}'}, None).ending == {
        ("a", 0): 3}
    assert parse_options({**BASE, "maxOffsetsPerTrigger": "3"}, None).max_offsets_per_trigger


def test_offset_json_round_trip() -> None:
    offs = {("t", 0): 5, ("t", 10): EARLIEST, ("u-v", 2): LATEST, ("t", 2): 0}
    text = offsets_to_json(offs)
    assert json.loads(text) == {"t": {"0": 5, "2": 0, "10": -2}, "u-v": {"2": -1}}
    assert offsets_from_json(text) == offs
    assert offsets_from_json(json.loads(text)) == offs
    assert offsets_from_json(to_offset_dict(offs)) == offs
    json.dumps(to_offset_dict(offs))  # Spark checkpoints it as JSON


@pytest.mark.parametrize("bad", ['{"t": {"0": -3}}', '{"t": {"x": 1}}', '{"t": 1}', "[1]",
                                 '{"t": {"0": true}}'])
def test_offset_json_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="'offsets'"):
        offsets_from_json(bad)


def test_rate_limit_prorates_and_progresses() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): EARLIEST}
    end = {("t", 0): 100, ("t", 1): 400, ("t", 2): 100}
    out = rate_limit(start, end, 50, {("t", 2): 0})
    assert sum(out[tp] - (start[tp] if start[tp] >= 0 else 0) for tp in out) == 50
    assert all(out[tp] <= end[tp] for tp in out)
    assert out[("t", 1)] - 100 > out[("t", 0)]  # bigger backlog, bigger share
    assert rate_limit(start, end, 10_000, {("t", 2): 0}) == end
    one = rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 1, ("t", 1): 1}, 1, {})
    assert sum(one.values()) == 1  # rounding never stalls the stream


def test_schema_matches_kafka_format() -> None:
    assert schema_ddl(False).startswith("key BINARY, value BINARY, topic STRING, partition INT")
    assert "headers ARRAY<STRUCT<key: STRING, value: BINARY>>" in schema_ddl(True)


@pytest.mark.parametrize("raw", ["0", "-3", "two", ""])
def test_min_partitions_must_be_positive(raw: str) -> None:
    with pytest.raises(ValueError, match="'minPartitions'"):
        opts(True, minPartitions=raw)


def test_min_partitions_parsed_for_batch_and_stream() -> None:
    assert opts(True, minPartitions="6").min_partitions == 6
    assert opts(False, minpartitions="4").min_partitions == 4
    assert opts(True).min_partitions is None


def test_split_ranges_is_proportional_contiguous_and_exact() -> None:
    from streamiq.pipeline.source import split_ranges

    a, b = ("t", 0), ("t", 1)
    ranges = [(a, 0, 90_000), (b, 100, 30_100)]
    out = split_ranges(ranges, 4, min_split=1000)
    assert [r for r in out if r[0] == a] == [(a, 0, 30_000), (a, 30_000, 60_000),
                                             (a, 60_000, 90_000)]
    assert [r for r in out if r[0] == b] == [(b, 100, 30_100)]
    # every offset exactly once
    for tp, s, e in ranges:
        got = sorted((x, y) for t, x, y in out if t == tp)
        assert got[0][0] == s and got[-1][1] == e
        assert all(got[i][1] == got[i + 1][0] for i in range(len(got) - 1))


def test_split_ranges_leaves_small_or_enough_ranges_alone() -> None:
    from streamiq.pipeline.source import split_ranges

    small = [(("t", 0), 0, 5000), (("t", 1), 0, 3)]
    assert split_ranges(small, 8, min_split=4096) == small  # pieces would be too short
    three = [(("t", p), 0, 100_000) for p in range(3)]
    assert split_ranges(three, 3) == three and split_ranges(three, None) == three
    assert len(split_ranges(three, 7, min_split=1)) == 6  # round(7/3) = 2 each
