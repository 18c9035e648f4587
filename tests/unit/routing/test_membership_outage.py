"""A members topic that stops delivering (its partition leader lost, the broker
restarting) silences every member at once: a node that no longer hears its own
heartbeats judges its peers as when the topic last delivered, so nobody "leaves"; a
peer that really stops while the topic delivers is gone after the timeout."""

from __future__ import annotations

import json

from fakes import Clock

from streamiq.routing.membership import KafkaMembership

A, B, C = "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"


def _hb(endpoint: str, incarnation: str = "i") -> bytes:
    return json.dumps({"endpoint": endpoint, "incarnation": incarnation,
                       "partitions": {}}).encode()


def _node() -> tuple[KafkaMembership, Clock]:
    clock = Clock(100.0)
    m = KafkaMembership({}, "t", A, lambda: {}, heartbeat_ms=250, timeout_ms=1500, clock=clock)
    m.hearing()  # the listener runs
    return m, clock


def _round(m: KafkaMembership, clock: Clock, *who: str) -> None:
    """0.25 s pass; the heartbeats of ``who`` arrive (A's own: this node's incarnation)."""
    clock.now += 0.25
    for e in who:
        assert m.receive(_hb(e, m.incarnation if e == A else "i"))


def test_when_the_topic_stops_delivering_no_member_leaves() -> None:
    m, clock = _node()
    for _ in range(4):
        _round(m, clock, A, B, C)
    for _ in range(40):  # 10 s of silence from everyone, this node's own heartbeats too
        _round(m, clock)
        assert sorted(m.live()) == [A, B, C]
    _round(m, clock, A)  # the topic delivers again: this node's heartbeat first
    assert sorted(m.live()) == [A, B, C]
    _round(m, clock, A, B, C)
    assert sorted(m.live()) == [A, B, C]


def test_a_peer_that_stops_while_the_topic_delivers_is_gone_after_the_timeout() -> None:
    m, clock = _node()
    for _ in range(4):
        _round(m, clock, A, B, C)
    for _ in range(4):  # 1 s: within the timeout
        _round(m, clock, A, B)
    assert sorted(m.live()) == [A, B, C]
    for _ in range(4):  # 2 s since C's last heartbeat
        _round(m, clock, A, B)
    assert sorted(m.live()) == [A, B]


def test_a_peer_that_died_during_an_outage_is_gone_once_the_topic_delivers() -> None:
    m, clock = _node()
    for _ in range(4):
        _round(m, clock, A, B, C)
    for _ in range(20):  # 5 s outage
        _round(m, clock)
    for _ in range(8):  # then 2 s in which A and B are heard, C never again
        _round(m, clock, A, B)
    assert sorted(m.live()) == [A, B]


def test_another_incarnation_on_this_endpoint_is_not_this_node_hearing_itself() -> None:
    m, clock = _node()
    for _ in range(4):
        _round(m, clock, A, B)
    for _ in range(12):  # 3 s: only an old process's heartbeats on this endpoint
        clock.now += 0.25
        m.receive(_hb(A, "an-old-incarnation"))
    assert sorted(m.live()) == [A, B]  # the topic's delivery is not proven: B kept
