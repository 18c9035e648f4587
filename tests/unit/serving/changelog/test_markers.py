"""Markers: parsed strictly, and refused when they claim input offsets that cannot be."""

from __future__ import annotations

import json

import pytest

from streamiq.kafka.skips import Skip
from streamiq.serving.changelog.markers import MAX_CLAIMS, InputEnds, parse_marker
from streamiq.views.base import marker_value


def _reason(raw: bytes | None) -> str:
    with pytest.raises(Skip) as err:
        parse_marker(raw)
    return err.value.reason


def test_a_marker_as_the_sink_writes_it_parses() -> None:
    assert parse_marker(marker_value(4, {"in": {0: 7, 2: 0}})) == {"in": {0: 7, 2: 0}}
    assert parse_marker(marker_value(0, {})) == {}


@pytest.mark.parametrize("raw", [
    None, b"", b"{not json", b"[1]", b'{"offsets": [1]}',
    b'{"offsets": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",  # RecursionError before
    b'{"offsets": {"in": ' + b'{"a":' * 3000 + b"1" + b"}" * 3001 + b"}",
    json.dumps({"offsets": {"in": {"0": "7"}}}).encode(),
    json.dumps({"offsets": {"in": {"0": -1}}}).encode(),
    json.dumps({"offsets": {"in": {"0": 1 << 64}}}).encode(),
    json.dumps({"offsets": {"in": {"0": True}}}).encode(),
    json.dumps({"offsets": {"in": {"x": 1}}}).encode(),
    json.dumps({"offsets": {"in": {"-1": 1}}}).encode(),
    json.dumps({"offsets": {"in": {"\u00b2": 1}}}).encode(),  # a digit, not ASCII
    json.dumps({"offsets": {"in": {str(p): 0 for p in range(MAX_CLAIMS + 1)}}}).encode(),
])
def test_malformed_markers_are_refused(raw: bytes | None) -> None:
    assert _reason(raw) == "bad_marker"


class Kafka:
    """Input ends as Kafka reports them; counts the questions asked."""

    def __init__(self, ends: dict[tuple[str, int], int]) -> None:
        self.ends = ends
        self.asked: list[list[tuple[str, int]]] = []
        self.down = False

    def __call__(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        self.asked.append(tps)
        if self.down:
            raise TimeoutError("no broker")
        return {tp: self.ends.get(tp) for tp in tps}


def _refused(ends: InputEnds, claims: dict[str, dict[int, int]]) -> str:
    with pytest.raises(Skip) as err:
        ends.check(claims)
    return err.value.reason


def test_claims_past_the_input_end_are_refused_and_kafka_asked_only_past_the_known_end(
        ) -> None:
    kafka = Kafka({("in", 0): 10, ("in", 1): 0})
    ends = InputEnds(kafka)
    ends.check({"in": {0: 10, 1: 0}})
    assert kafka.asked == [[("in", 0), ("in", 1)]]
    ends.check({"in": {0: 4}})  # within what Kafka reported: not asked again
    assert len(kafka.asked) == 1
    assert _refused(ends, {"in": {0: 10**12}}) == "marker_beyond_end"
    assert kafka.asked[-1] == [("in", 0)]
    kafka.ends[("in", 0)] = 20  # the input grew: a new claim is asked about, and taken
    ends.check({"in": {0: 15}})
    assert ends.ends[("in", 0)] == 20


def test_claims_on_partitions_the_input_does_not_have_are_refused() -> None:
    kafka = Kafka({("in", 0): 10})
    ends = InputEnds(kafka)
    assert _refused(ends, {"in": {7: 1}}) == "marker_unknown_partition"
    assert _refused(ends, {"nope": {0: 0}}) == "marker_unknown_partition"
    asked = len(kafka.asked)
    assert _refused(ends, {"in": {0: 1, 7: 1}}) == "marker_unknown_partition"
    assert len(kafka.asked) == asked  # remembered missing for a while: not asked again


def test_claims_kafka_cannot_confirm_are_refused() -> None:
    kafka = Kafka({("in", 0): 10})
    kafka.down = True
    ends = InputEnds(kafka, retry_s=3600)
    assert _refused(ends, {"in": {0: 1}}) == "marker_unverified"
    kafka.down = False  # back, but not asked again before retry_s: no wait per marker
    assert _refused(ends, {"in": {0: 1}}) == "marker_unverified"
    assert len(kafka.asked) == 1
    ends.retry_s = 0
    ends.check({"in": {0: 1}})
