"""The Membership protocol (routing/base.py) and its in-memory implementation."""

from __future__ import annotations

import subprocess
import sys

from fakes import Clock

from streamiq.routing.base import Membership
from streamiq.routing.heartbeats import Report
from streamiq.routing.membership import KafkaMembership
from streamiq.routing.memory import StaticMembership
from streamiq.routing.router import Router

A, B, C = "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"
HOLDS: Report = {"v": {0: {"offset": 7, "lag": 0, "restored": 1}}}


def test_both_memberships_are_the_protocol() -> None:
    assert isinstance(StaticMembership(A), Membership)
    assert isinstance(KafkaMembership({}, "t", A, dict), Membership)


def test_the_router_does_not_load_the_kafka_membership() -> None:
    code = ("import sys, streamiq.routing.router; "
            "print('streamiq.routing.membership' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.strip() == "False"


def test_members_join_by_heartbeat_and_leave_at_once() -> None:
    m = StaticMembership(A)
    assert set(m.live()) == {A}  # this node alone, always live
    m.heartbeat(B, HOLDS, incarnation="b1", started_at=5.0)
    m.heartbeat(C)
    live = m.live()
    assert set(live) == {A, B, C}
    assert (live[B].partitions, live[B].incarnation, live[B].started_at) == (HOLDS, "b1", 5.0)
    m.leave(B)
    assert set(m.live()) == {A, C}


def test_a_silent_member_is_dead_after_the_timeout_and_back_on_its_next_heartbeat() -> None:
    clock = Clock()
    m = StaticMembership(A, timeout_s=1.5, clock=clock)
    m.heartbeat(B)
    clock.now += 1.5
    assert B in m.live()  # silent for exactly the timeout: still live
    clock.now += 0.01
    assert set(m.live()) == {A}  # this node never times out
    m.heartbeat(B)
    assert B in m.live()


def test_a_suspect_is_routed_around_until_it_heartbeats_again() -> None:
    m = StaticMembership(A)
    m.heartbeat(B, HOLDS)
    router = Router(m, {"v": 1}, 1)
    assert [e.address for e in router.replicas("v", 0, 10)] == [B]
    m.suspect(B)
    m.suspect(A)  # never itself
    assert router.replicas("v", 0, 10) == [] and set(m.live()) == {A}
    assert m.suspected == [B]
    m.heartbeat(B, HOLDS)
    assert [e.address for e in router.replicas("v", 0, 10)] == [B]


def test_this_node_reports_what_report_returns() -> None:
    reports: list[Report] = [{}]
    m = StaticMembership(A, report=lambda: reports[0])
    router = Router(m, {"v": 1}, 0)
    assert router.owner("v", 0, 10) is None  # holds nothing yet
    reports[0] = HOLDS
    owner = router.owner("v", 0, 10)
    assert owner is not None and (owner.address, owner.role) == (A, "active")


def test_lifecycle_and_skips() -> None:
    m = StaticMembership(A)
    m.start()
    assert m.started and not m.silenced and m.skipped == 0
    m.silence()
    assert m.silenced
    m.skips.skip("not_json", "junk")
    assert m.skipped == 1 and dict(m.skips.reasons) == {"not_json": 1}
