"""Signed heartbeats: with a cluster secret, only its holders are members."""

from __future__ import annotations

import json

from streamiq.routing.membership import SIGNATURE_HEADER, Membership, sign

A, B, EVIL = "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:6666"
SECRET = b"s3cret"


def _hb(endpoint: str) -> bytes:
    return json.dumps({"endpoint": endpoint, "incarnation": "i", "partitions": {
        "v": {str(p): {"offset": 10, "lag": 0, "restored": 1} for p in range(3)}}}).encode()


def _members(secret: bytes | None) -> Membership:
    return Membership({}, "t", A, lambda: {}, secret=secret)


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


def test_a_tampered_heartbeat_is_not_a_member() -> None:
    m = _members(SECRET)
    signed_value = _hb(B)
    tampered = signed_value.replace(b'"lag": 0', b'"lag": 9', 1)
    assert not m.receive(tampered, [(SIGNATURE_HEADER, sign(SECRET, signed_value))])
    assert sorted(m.live()) == [A]


def test_without_a_secret_heartbeats_are_taken_as_they_come() -> None:
    m = _members(None)
    assert m.receive(_hb(B), None) and sorted(m.live()) == [A, B]
