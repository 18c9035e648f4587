"""Heartbeats: a record that is not a valid heartbeat is skipped and counted, never fatal."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes import Clock

from streamiq.routing.membership import (
    MAX_HEARTBEAT_BYTES,
    BadHeartbeat,
    KafkaMembership,
    parse_heartbeat,
)
from streamiq.routing.router import Router

A, B, C = "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"


def _hb(endpoint: Any = B, **over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"endpoint": endpoint, "incarnation": "i1", "started_at": 1.5,
                           "leaving": False,
                           "partitions": {"v": {"0": {"offset": 10, "lag": 0, "restored": 1}}}}
    doc.update(over)
    return doc


def _raw(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def test_a_valid_heartbeat_parses() -> None:
    doc = parse_heartbeat(_raw(_hb()))
    assert doc == {"endpoint": B, "incarnation": "i1", "leaving": False, "started_at": 1.5,
                   "partitions": {"v": {0: {"offset": 10, "lag": 0, "restored": 1}}}}
    # optional fields default; extra fields (a newer node's) are ignored
    minimal = parse_heartbeat(_raw({"endpoint": B, "incarnation": "i", "new": [1]}))
    assert minimal["partitions"] == {} and minimal["leaving"] is False
    # a partition being copied from a peer says how far (an integer, or nothing)
    copying = {"0": {"offset": 0, "lag": -1, "restored": 0, "copied": 420},
               "1": {"offset": 0, "lag": -1, "restored": 0, "copied": "x"}}
    doc = parse_heartbeat(_raw(_hb(partitions={"v": copying})))
    assert doc["partitions"]["v"] == {0: {"offset": 0, "lag": -1, "restored": 0,
                                          "copied": 420},
                                      1: {"offset": 0, "lag": -1, "restored": 0}}


BAD: dict[str, bytes] = {
    "not json": b"{not json",
    "binary": bytes(range(256)),
    "non-utf8 json-ish": b'{"endpoint": "\xff\xfe"}',
    "empty": b"",
    "a list": _raw([_hb()]),
    "a string": _raw("127.0.0.1:9002"),
    "null": b"null",
    "missing endpoint": _raw({k: v for k, v in _hb().items() if k != "endpoint"}),
    "missing incarnation": _raw({k: v for k, v in _hb().items() if k != "incarnation"}),
    "endpoint a number": _raw(_hb(endpoint=9002)),
    "endpoint without port": _raw(_hb(endpoint="127.0.0.1")),
    "endpoint port 0": _raw(_hb(endpoint="127.0.0.1:0")),
    "endpoint port too big": _raw(_hb(endpoint="127.0.0.1:70000")),
    "endpoint port not numeric": _raw(_hb(endpoint="127.0.0.1:http")),
    "endpoint port unicode digits": _raw(_hb(endpoint="127.0.0.1:\u0661\u0662")),
    "endpoint no host": _raw(_hb(endpoint=":9002")),
    "endpoint a url": _raw(_hb(endpoint="http://x/y:9002")),
    "incarnation a number": _raw(_hb(incarnation=7)),
    "leaving a string": _raw(_hb(leaving="yes")),
    "started_at a string": _raw(_hb(started_at="now")),
    "started_at NaN": b'{"endpoint": "127.0.0.1:9002", "incarnation": "i", "started_at": NaN}',
    "partitions a list": _raw(_hb(partitions=[1, 2])),
    "view not an object": _raw(_hb(partitions={"v": 3})),
    "partition not a number": _raw(_hb(partitions={"v": {"zero": {"offset": 1, "lag": 0,
                                                                   "restored": 1}}})),
    "negative partition": _raw(_hb(partitions={"v": {"-1": {"offset": 1, "lag": 0,
                                                             "restored": 1}}})),
    "state not an object": _raw(_hb(partitions={"v": {"0": "restored"}})),
    "state missing lag": _raw(_hb(partitions={"v": {"0": {"offset": 1, "restored": 1}}})),
    "offset a string": _raw(_hb(partitions={"v": {"0": {"offset": "1", "lag": 0,
                                                         "restored": 1}}})),
    "lag a bool": _raw(_hb(partitions={"v": {"0": {"offset": 1, "lag": True, "restored": 1}}})),
    "oversized": _raw(_hb(pad="x" * MAX_HEARTBEAT_BYTES)),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_malformed_records_are_rejected(name: str) -> None:
    with pytest.raises(BadHeartbeat):
        parse_heartbeat(BAD[name])


def _membership(clock: Clock | None = None) -> KafkaMembership:
    """A membership that is not started (no Kafka): records are fed to receive()."""
    m = KafkaMembership({"bootstrap.servers": "127.0.0.1:1"}, "t", A, dict, 250, 1500,
                        clock=clock or Clock())
    m.hearing()  # as the listener does once its consumer is assigned
    return m


def test_bad_records_are_skipped_and_counted_and_routing_is_unaffected() -> None:
    m = _membership()
    assert m.receive(_raw(_hb(B)))
    assert m.receive(_raw(_hb(C)))
    router = Router(m, {"v": 3}, 1)
    before = {p: router.assigned("v", p) for p in range(3)}
    for raw in BAD.values():
        assert m.receive(raw) is False
    assert m.skipped == len(BAD)
    assert sorted(m.live()) == [A, B, C]  # valid members still live, no junk member
    assert {p: router.assigned("v", p) for p in range(3)} == before
    assert m.live()[B].partitions == {"v": {0: {"offset": 10, "lag": 0, "restored": 1}}}
    # and later valid heartbeats still apply
    assert m.receive(_raw(_hb(B, leaving=True)))
    assert sorted(m.live()) == [A, C]


def test_members_do_not_expire_while_the_listener_is_deaf() -> None:
    clock = Clock()
    m = _membership(clock)
    m.receive(_raw(_hb(B)))
    clock.now += 1.0  # heard 1 s ago (timeout 1.5 s)
    m.deaf()  # the listener crashed and stays down 5 s
    clock.now += 5.0
    assert B in m.live()  # B is judged as when this node last heard, not declared dead
    m.hearing()  # listening again: the deaf time is credited back
    assert B in m.live()
    clock.now += 2.0  # then silent past the timeout: dead
    assert B not in m.live()


def test_a_suspect_stays_suspect_across_deafness() -> None:
    clock = Clock()
    m = _membership(clock)
    m.receive(_raw(_hb(B)))
    m.deaf()
    clock.now += 0.1
    m.suspect(B)
    clock.now += 0.1
    m.hearing()
    assert B not in m.live()
    clock.now += 0.25
    m.receive(_raw(_hb(B)))  # until it heartbeats again
    assert B in m.live()
