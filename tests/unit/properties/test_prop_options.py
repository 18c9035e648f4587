"""Kafka source options (pipeline/options.py): offsets JSON round trip; any option map
and any offsets text is parsed or refused with ValueError naming the option."""

from __future__ import annotations

from typing import Any

from garbage import deep_json, json_text
from hypothesis import given
from hypothesis import strategies as st

from streamiq.pipeline.options import (
    EARLIEST,
    KafkaOptions,
    offsets_from_json,
    offsets_to_json,
    parse_options,
)

offset_maps = st.dictionaries(
    st.tuples(st.text(max_size=15), st.integers(min_value=0, max_value=1000)),
    st.integers(min_value=EARLIEST, max_value=2**63 - 1), max_size=8)


@given(offset_maps)
def test_offsets_round_trip(offsets: dict[tuple[str, int], int]) -> None:
    assert offsets_from_json(offsets_to_json(offsets)) == offsets


@given(json_text)
def test_offsets_garbage_is_offsets_or_value_error(raw: str) -> None:
    try:
        out = offsets_from_json(raw, "startingOffsets")
    except ValueError as exc:
        assert "startingOffsets" in str(exc)
        return
    assert all(isinstance(t, str) and p >= 0 and o >= EARLIEST for (t, p), o in out.items())


_NAMES = ["subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
          "maxOffsetsPerTrigger", "failOnDataLoss", "includeHeaders", "minPartitions",
          "kafkaConsumer.pollTimeoutMs", "pauseWhenExists", "emptyFirstBatch",
          "kafka.bootstrap.servers", "kafka.auto.offset.reset", "kafka.client.id", "kafka.",
          "startingTimestamp", "bogus"]
_VALUES = st.one_of(
    st.text(max_size=30), json_text, st.sampled_from(
        ["earliest", "latest", " Latest ", "true", "FALSE", "0", "12", "-1", "t", "t1,t2",
         '{"t": [0, 1]}', '{"t": {"0": -2}}', '{"t": {"0": 5, "1": -1}}', "(((", "a{99999}",
         "(" * 1200, "a{4294967296}", "[z-a]", "\u00b2"]))


@given(st.dictionaries(st.sampled_from(_NAMES) | st.text(max_size=12), _VALUES, max_size=6),
       st.sampled_from([True, False, None]), st.booleans())
def test_options_are_parsed_or_value_error(opts: dict[str, Any], streaming: bool | None,
                                           servers: bool) -> None:
    if servers:
        opts = {**opts, "kafka.bootstrap.servers": "127.0.0.1:9092"}
    try:
        out = parse_options(opts, streaming)
    except ValueError:
        return
    assert isinstance(out, KafkaOptions) and out.kafka.get("bootstrap.servers")
    assert out.max_offsets_per_trigger is None or out.max_offsets_per_trigger > 0
    assert out.poll_timeout_ms > 0


@given(deep_json)
def test_deep_assign_is_a_value_error(raw: str) -> None:
    try:
        parse_options({"kafka.bootstrap.servers": "h:1", "assign": raw}, True)
    except ValueError as exc:
        assert "assign" in str(exc)
