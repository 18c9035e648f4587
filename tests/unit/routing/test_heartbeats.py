"""Heartbeat records: any bytes are skipped with a reason, and none is sent too large."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streamiq.routing.heartbeats import SEND_LIMIT, BadHeartbeat, Report, encode, parse
from streamiq.routing.membership import KafkaMembership

B = "127.0.0.1:9002"


@pytest.mark.parametrize(("raw", "reason"), [
    (b"[" * 200_000, "not_json"),  # RecursionError inside the parser
    (b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "not_json"),
    (b"\xff" * 10, "not_json"),
    (None, "not_json"),
    (b"x" * (2 << 20), "too_large"),
    (b"[]", "not_object"),
    (json.dumps({"endpoint": B, "incarnation": "i",
                 "partitions": {"v": {"9" * 5000: {}}}}).encode(), "bad_heartbeat"),
    (json.dumps({"endpoint": B, "incarnation": "i", "seq": -1}).encode(), "bad_heartbeat"),
    (json.dumps({"endpoint": B, "incarnation": "i", "sent_at": "now"}).encode(),
     "bad_heartbeat"),
])
def test_a_record_that_is_not_a_heartbeat_names_its_reason(raw: Any, reason: str) -> None:
    with pytest.raises(BadHeartbeat) as err:
        parse(raw)
    assert err.value.reason == reason
    m = KafkaMembership({}, "t", "127.0.0.1:9001", lambda: {})
    assert not m.receive(raw) and m.skips.reasons == {reason: 1}


def test_a_heartbeat_is_never_sent_over_the_limit() -> None:
    report: Report = {f"v{i}": {p: {"offset": 10**12, "lag": 0, "restored": 1}
                                for p in range(4096)}
                      for i in range(8)}  # 32768 partitions held: ~1.5 MB as JSON
    report["small"] = {0: {"offset": 1, "lag": 0, "restored": 1}}
    sender = KafkaMembership({}, "t", B, lambda: report)
    raw = sender._heartbeat()
    assert len(raw) <= SEND_LIMIT
    hb, sent = parse(raw)
    assert "small" in hb["partitions"] and 0 < len(hb["partitions"]) < len(report)
    assert sent.seq == 1 and sent.at is not None


def test_a_heartbeat_within_the_limit_is_sent_whole() -> None:
    doc = {"endpoint": B, "incarnation": "i",
           "partitions": {"v": {"0": {"offset": 1, "lag": 0, "restored": 1}}}}
    assert json.loads(encode(doc)) == doc


@pytest.mark.parametrize(("raw", "reason"), [
    (b'{"endpoint": "127.0.0.1:2", "incarnation": "i", "started_at": NaN}', "not_json"),
    (b'{"x": Infinity}', "not_json"),
    (b'{"x": ' + b"[" * 40 + b"]" * 40 + b"}", "too_deep"),  # parses, too deep to keep
])
def test_what_cannot_be_answered_as_json_is_not_kept(raw: bytes, reason: str) -> None:
    with pytest.raises(BadHeartbeat) as err:
        parse(raw)
    assert err.value.reason == reason
