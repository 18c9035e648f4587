"""Heartbeats (routing/membership.py): a valid one parses to itself; any record on the
members topic parses or raises BadHeartbeat, which the listener skips. Any other
exception escapes the listener and crashes it (then again on the same record)."""

from __future__ import annotations

import json
from typing import Any

from garbage import deep_json, huge_digits, json_values
from hypothesis import given
from hypothesis import strategies as st

from streamiq.routing.membership import BadHeartbeat, parse_heartbeat

hosts = st.from_regex(r"[a-z0-9.-]{1,20}", fullmatch=True) | st.just("::1")
counts = st.integers(min_value=0, max_value=2**63 - 1)
reports = st.dictionaries(
    st.text(max_size=10),
    st.dictionaries(st.integers(min_value=0, max_value=4096),
                    st.fixed_dictionaries({"offset": counts, "lag": counts,
                                           "restored": st.sampled_from([0, 1])}), max_size=4),
    max_size=3)
heartbeats = st.fixed_dictionaries({
    "endpoint": st.builds(lambda h, p: f"{h}:{p}", hosts,
                          st.integers(min_value=1, max_value=65535)),
    "incarnation": st.text(min_size=1, max_size=20),
    "leaving": st.booleans(),
    "started_at": st.floats(min_value=0, max_value=4e9) | st.integers(0, 2**40),
    "partitions": reports,
})


@given(heartbeats)
def test_heartbeat_round_trip(doc: dict[str, Any]) -> None:
    hb = parse_heartbeat(json.dumps(doc).encode())
    assert hb["endpoint"] == doc["endpoint"] and hb["incarnation"] == doc["incarnation"]
    assert hb["leaving"] is doc["leaving"] and hb["started_at"] == float(doc["started_at"])
    assert hb["partitions"] == doc["partitions"]


def _mutate(doc: dict[str, Any], field: str, value: Any) -> bytes:
    return json.dumps({**doc, field: value}).encode()


garbage_records = st.one_of(
    st.binary(max_size=200),
    deep_json.map(str.encode),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.builds(_mutate, heartbeats,
              st.sampled_from(["endpoint", "incarnation", "leaving", "started_at",
                               "partitions"]),
              json_values | huge_digits.map(lambda d: f"h:{d}")),
    st.builds(lambda doc, n: json.dumps({**doc, "started_at": 10**n}).encode(), heartbeats,
              st.integers(min_value=300, max_value=400)),
)


@given(garbage_records)
def test_garbage_is_a_heartbeat_or_bad_heartbeat(raw: bytes) -> None:
    try:
        hb = parse_heartbeat(raw)
    except BadHeartbeat:
        return
    host, _, port = hb["endpoint"].rpartition(":")
    assert host and 1 <= int(port) <= 65535 and hb["incarnation"]
    assert isinstance(hb["started_at"], float)
