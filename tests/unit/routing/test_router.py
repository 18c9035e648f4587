"""Routing decisions from heartbeat state (an in-memory membership; no Kafka)."""

from __future__ import annotations

import pytest

from streamiq.routing.heartbeats import PartitionReport, Report
from streamiq.routing.memory import StaticMembership
from streamiq.routing.router import Router

A, B, C = "127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"


def _state(lag: int, restored: bool = True) -> PartitionReport:
    return {"offset": 100 - lag, "lag": lag, "restored": int(restored)}


def _members(me: str, reports: dict[str, Report]) -> StaticMembership:
    """``me`` among members that each heartbeat once with their report (kept by
    reference: a test changes a report in place and the next route sees it)."""
    m = StaticMembership(me)
    for address, report in reports.items():
        m.heartbeat(address, report)
    return m


def _router(members: dict[str, Report], me: str = A, standbys: int = 1) -> Router:
    return Router(_members(me, members), {"v": 3}, standbys)


def _all_hold(lag: int = 0) -> dict[str, Report]:
    return {m: {"v": {p: _state(lag) for p in range(3)}} for m in (A, B, C)}


def test_active_preferred_then_standby_then_previous() -> None:
    r = _router(_all_hold())
    for p in range(3):
        reps = r.replicas("v", p, max_lag=10)
        assigned = r.assigned("v", p)
        assert [e.address for e in reps][:2] == assigned
        assert [e.role for e in reps] == ["active", "standby", "previous"]


def test_lagging_active_is_skipped_for_fresh_standby() -> None:
    members = _all_hold()
    r = _router(members)
    active, standby = r.assigned("v", 0)
    members[active]["v"][0] = _state(lag=500)
    reps = r.replicas("v", 0, max_lag=10)
    assert reps[0].address == standby and reps[0].role == "standby"
    assert r.replicas("v", 0, max_lag=1000)[0].address == active


def test_restoring_replica_never_answers() -> None:
    members = _all_hold()
    r = _router(members)
    active = r.assigned("v", 1)[0]
    members[active]["v"][1] = _state(lag=0, restored=False)
    assert active not in [e.address for e in r.replicas("v", 1, max_lag=10**9)]


def test_no_replica_means_none() -> None:
    r = _router({A: {}, B: {}, C: {}})
    assert r.owner("v", 0, max_lag=10) is None


def test_why_no_replica_names_each_members_state() -> None:
    """A subscription that finds no replica says why (its 503's detail), and so does a
    read whose position no replica reflected."""
    r = _router({A: {"v": {0: _state(lag=0, restored=False)}}, B: {"v": {0: _state(500)}},
                 C: {}})
    assert r.states("v", [0], max_lag=10) == (
        f"partition 0: {A} restoring, {B} lag 500 > 10, {C} does not hold it")
    # within the bound (a read whose position no replica reflected): the lag alone
    assert r.states("v", [0], max_lag=1000) == (
        f"partition 0: {A} restoring, {B} lag 500, {C} does not hold it")


def test_previous_owner_kept_until_new_replicas_restored() -> None:
    members: dict[str, Report] = {A: {"v": {p: _state(0) for p in range(3)}}, B: {}, C: {}}
    r = _router(members, me=A, standbys=0)
    held = {("v", p) for p in range(3)}
    wanted = r.wanted_local(held)
    assert wanted == held  # nobody else has restored anything yet: A keeps it all
    for m in (B, C):
        members[m]["v"] = {p: _state(0) for p in range(3)}
    mine = {("v", p) for p in range(3) if r.assigned("v", p)[0] == A}
    assert r.wanted_local(held) == mine  # handover complete: A keeps only its own


def test_all_nodes_compute_the_same_map() -> None:
    maps = [_router(_all_hold(), me=m).assignment() for m in (A, B, C)]
    assert maps[0] == maps[1] == maps[2]


def test_a_global_view_is_assigned_to_every_member_and_wanted_whole_by_each() -> None:
    members: dict[str, Report] = {m: {} for m in (A, B, C)}
    for me in (A, B, C):
        r = Router(_members(me, members), {"v": 3, "g": 3}, 0, global_views=["g"])
        for p in range(3):
            assert sorted(r.assigned("g", p)) == [A, B, C]
            assert r.assigned("g", p)[0] == r.assigned("v", p)[0]  # the same balanced active
            assert len(r.assigned("v", p)) == 1  # a keyed view keeps its one copy
        wanted = r.wanted_local(set())
        assert {("g", p) for p in range(3)} <= wanted  # every node holds all of g
        assert len([vp for vp in wanted if vp[0] == "v"]) == 1  # and its share of v


def test_a_view_found_while_running_is_routed() -> None:
    r = _router(_all_hold())
    r.add_view("g", 2, is_global=True)
    assert sorted(r.assigned("g", 1)) == [A, B, C] and r.partitions["g"] == 2


def test_membership_changes_are_counted_and_logged_once_each(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    membership = StaticMembership(A)
    r = Router(membership, {"v": 3}, 1)
    with caplog.at_level(logging.INFO, logger="streamiq.routing"):
        r.assignment()  # this node alone, first look: not a change
        assert r.changes == 0
        membership.heartbeat(B)
        membership.heartbeat(C)
        r.assignment()
        r.assignment()  # same members: nothing new
        membership.leave(B)
        r.assignment()
    assert r.changes == 2
    lines = [rec.getMessage() for rec in caplog.records]
    assert lines == [f"members: joined {B}, {C}; 3 live", f"members: left {B}; 2 live"]
