"""Signed heartbeats: with a cluster secret, only its holders are members."""

from __future__ import annotations

import json
import time

import pytest

from streamiq.routing.membership import SIGNATURE_HEADER, KafkaMembership, sign

A, B, EVIL = "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:6666"
SECRET = b"s3cret"


def _hb(endpoint: str, seq: int = 1, sent_at: float | None = None,
        incarnation: str = "i") -> bytes:
    return json.dumps({"endpoint": endpoint, "incarnation": incarnation,
                       "sent_at": time.time() if sent_at is None else sent_at, "seq": seq,
                       "partitions": {"v": {str(p): {"offset": 10, "lag": 0, "restored": 1}
                                            for p in range(3)}}}).encode()


def _sig(value: bytes) -> list[tuple[str, bytes]]:
    return [(SIGNATURE_HEADER, sign(SECRET, value))]


def _members(secret: bytes | None) -> KafkaMembership:
    return KafkaMembership({}, "t", A, lambda: {}, secret=secret)


def test_only_heartbeats_signed_with_the_cluster_secret_make_members() -> None:
    m = _members(SECRET)
    good = _hb(B)
    assert m.receive(good, [(SIGNATURE_HEADER, sign(SECRET, good))])
    forged = _hb(EVIL)  # claims every partition, restored, lag 0
    for headers in (None, [], [(SIGNATURE_HEADER, sign(b"guess", forged))],
                    [(SIGNATURE_HEADER, sign(SECRET, good))],  # another record's signature
                    [(SIGNATURE_HEADER, None)], [("other", sign(SECRET, forged))]):
        assert not m.receive(forged, headers)
    assert sorted(m.live()) == [A, B] and m.skipped == 6


def test_headers_given_as_a_mapping_are_read_like_pairs() -> None:
    # confluent_kafka types a record's headers as pairs or a mapping: both carry the
    # signature (a mapping was unpacked as pairs of characters, skipped as undecodable)
    m = _members(SECRET)
    good, forged = _hb(B), _hb(EVIL)
    assert m.receive(good, {SIGNATURE_HEADER: sign(SECRET, good)})
    assert not m.receive(forged, {SIGNATURE_HEADER: sign(b"guess", forged)})
    assert sorted(m.live()) == [A, B] and dict(m.skips.reasons) == {"unsigned": 1}


def test_a_tampered_heartbeat_is_not_a_member() -> None:
    m = _members(SECRET)
    signed_value = _hb(B)
    tampered = signed_value.replace(b'"lag": 0', b'"lag": 9', 1)
    assert not m.receive(tampered, [(SIGNATURE_HEADER, sign(SECRET, signed_value))])
    assert sorted(m.live()) == [A]


def test_without_a_secret_heartbeats_are_taken_as_they_come() -> None:
    m = _members(None)
    assert m.receive(_hb(B), None) and sorted(m.live()) == [A, B]


def test_a_replayed_heartbeat_is_refused_and_does_not_bring_a_dead_member_back() -> None:
    now = [1000.0]
    m = KafkaMembership({}, "t", A, lambda: {}, secret=SECRET, timeout_ms=1500,
                        clock=lambda: now[0], wall=lambda: now[0] + 1.7e9)
    m.hearing()
    captured = [_hb(B, seq, sent_at=now[0] + 1.7e9) for seq in (1, 2)]
    assert all(m.receive(v, _sig(v)) for v in captured) and B in m.live()
    now[0] += 5  # B died: silent past the timeout
    assert B not in m.live()
    for v in captured:  # its last heartbeats, re-produced: the signature is still valid
        assert not m.receive(v, _sig(v))
    assert B not in m.live() and m.skips.reasons["replayed"] == 2
    restarted = _hb(B, 1, sent_at=now[0] + 1.7e9, incarnation="j")  # a new start counts again
    assert m.receive(restarted, _sig(restarted)) and B in m.live()


@pytest.mark.parametrize(("value", "reason"), [
    (_hb(B, sent_at=time.time() - 3600), "clock_skew"),  # captured an hour ago
    (_hb(B, sent_at=time.time() + 3600), "clock_skew"),
    (json.dumps({"endpoint": B, "incarnation": "i"}).encode(), "unbound"),  # binds no time
    (json.dumps({"endpoint": B, "incarnation": "i", "sent_at": time.time()}).encode(),
     "unbound"),
], ids=["an-hour-ago", "an-hour-ahead", "no-time", "time-unsigned"])
def test_a_signed_heartbeat_must_bind_a_recent_time(value: bytes, reason: str) -> None:
    m = _members(SECRET)
    assert not m.receive(value, _sig(value))
    assert B not in m.live() and m.skips.reasons == {reason: 1}


def test_heartbeats_sent_by_a_node_are_signed_bound_and_accepted_in_order() -> None:
    sender = KafkaMembership({}, "t", B, lambda: {}, secret=SECRET)
    first, second = sender._heartbeat(), sender._heartbeat()
    doc = json.loads(second)
    assert doc["seq"] == json.loads(first)["seq"] + 1 and abs(doc["sent_at"] - time.time()) < 60
    m = _members(SECRET)
    assert m.receive(first, _sig(first)) and m.receive(second, _sig(second))
    assert not m.receive(first, _sig(first)) and m.skips.reasons == {"replayed": 1}
