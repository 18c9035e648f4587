"""Placement: the one decision of where a one-partition request is answered (place, a
client's; for_peer, a peer's)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from streamiq.routing.router import Endpoint
from streamiq.serving.cluster.placement import Forward, Here, Placement, Redirect, Refuse
from streamiq.serving.cluster.traffic import Traffic

ME, B, C = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"


class Router:
    global_views: frozenset[str] = frozenset()

    def __init__(self, assigned: list[str], fresh: list[str]) -> None:
        self._assigned, self.fresh = assigned, fresh

    def assigned(self, view: str, p: int) -> list[str]:
        return self._assigned

    def replicas(self, view: str, p: int, max_lag: int) -> list[Endpoint]:
        return [Endpoint(a, "active", 0) for a in self.fresh]

    def owner(self, view: str, p: int, max_lag: int) -> Endpoint | None:
        return Endpoint(self.fresh[0], "active", 0) if self.fresh else None


def placement(assigned: list[str], fresh: list[str], held: bool = True, lag: int = 0,
              redirect: bool = False) -> Placement:
    node: Any = SimpleNamespace(endpoint=ME, partitions={"v": 1}, router=Router(assigned, fresh),
                                holds=lambda v, p: held, lag=lambda v, p: lag if held else -1)
    return Placement(node, Traffic(), redirect=redirect)


def test_a_peers_request_is_answered_here_or_refused() -> None:
    assert placement([B], [B]).for_peer("v", 0) == Here("previous", 0)
    d = placement([B], [B], held=False).for_peer("v", 0)
    assert isinstance(d, Refuse) and d.error.http_status == 421


def test_the_active_owner_answers_within_its_lag_else_the_preferred_replica() -> None:
    pl = placement([ME], [ME])
    assert pl.place("v", 0, 10, []) == Here("active", 0)
    assert pl.traffic.local == 1
    assert placement([ME], [B], lag=11).place("v", 0, 10, []) == Forward(B)
    assert placement([B], [B]).place("v", 0, 10, []) == Forward(B)
    assert placement([B], [B], redirect=True).place("v", 0, 10, []) == Redirect(B)


def test_a_first_ask_is_the_cached_preferred_replica_and_is_counted_tried() -> None:
    """One question (issue 48): the first ask of any lookup (lean path or full route)
    gets the preferred replica, cached, and names it tried; the next ask walks on."""
    pl = placement([B, C], [B, C])
    tried: list[str] = []
    assert pl.place("v", 0, 10, tried) == Forward(B) and tried == [B]
    router: Any = pl.node.router
    router.fresh = [C, B]  # the cluster moved: the cached choice stands a while
    assert pl.place("v", 0, 10, []) == Forward(B)
    assert pl.place("v", 0, 10, tried) == Forward(C) and tried == [B, C]
    pl.forget("v", 0, 10)  # the preferred one failed: chosen again
    assert pl.place("v", 0, 10, []) == Forward(C)


def test_the_full_route_walks_the_replicas_then_refuses_with_what_it_tried() -> None:
    pl = placement([B, ME], [B, C, ME])  # this node a fresh standby, after two others
    tried: list[str] = []
    assert pl.place("v", 0, 10, tried) == Forward(B)
    assert pl.place("v", 0, 10, tried) == Forward(C)
    assert pl.place("v", 0, 10, tried) == Here("standby", 0)
    d = pl.place("v", 0, 10, tried)
    assert isinstance(d, Refuse) and d.error.http_status == 503
    assert d.error.extra["tried"] == [B, C, ME]
    # a walk's refusal is not yet an answer (the route may walk again): the route and the
    # lean path count what they answer (test_coordinator_routing)
    assert pl.traffic.unavailable == 0


def test_a_restoring_active_owner_never_answers() -> None:
    pl = placement([ME], [B], held=False, lag=0)
    node: Any = pl.node
    node.lag = lambda v, p: 0  # its lag is known, its restore not finished
    assert pl.place("v", 0, 10, []) == Forward(B)


def test_one_planner_groups_every_fan_out_by_replica() -> None:
    """``plan``: each partition's first replica within the lag bound, grouped; a peer
    that lost a race lately (suspect) or one the caller names ``last`` is asked after
    the others, an ``excluded`` one never; a global view is read here first; a partition
    with no replica is in no group."""
    pl = placement([B, C], [B, C])
    assert pl.plan("v", [0, 1, 2], 10) == {B: [0, 1, 2]}
    assert pl.plan("v", [0, 1], 10, last={B}) == {C: [0, 1]}  # a failed upstream
    pl.hedging.hedged("lookup", C)
    assert pl.plan("v", [0], 10, last={B}) == {B: [0]}  # both asked last: the order stays
    assert pl.plan("v", [0, 1], 10, excluded={0: {B}}) == {C: [0], B: [1]}
    assert pl.plan("v", [0], 10, excluded={0: {B, C}}) == {}
    assert placement([B], []).plan("v", [0, 1], 10) == {}
    glob = placement([B, ME], [B, ME])
    glob.node.router.global_views = frozenset({"v"})
    assert glob.plan("v", [0, 1], 10) == {ME: [0, 1]}
    assert glob.plan("w", [0], 10) == {B: [0]}
