"""Deadlines and hedges: a slow replica is raced by the next one and asked last for a
while, never blamed as gone; nothing waits past the caller's budget."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from streamiq.config import Settings
from streamiq.errors import CutMoved, DeadlineExceeded
from streamiq.routing.memory import StaticMembership
from streamiq.routing.router import Endpoint
from streamiq.serving.cluster.coordinator import Coordinator, Relayed
from streamiq.serving.cluster.hedge import FLOOR_S, ONE_CAP_S, Hedging
from streamiq.serving.cluster.peers import Ask, PeerReply
from streamiq.serving.cluster.placement import Here, Refuse

ME, SLOW, FAST = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"


class Router:
    global_views: frozenset[str] = frozenset()

    def replicas(self, view: str, p: int, max_lag: int) -> list[Endpoint]:
        return [Endpoint(SLOW, "active", 0), Endpoint(FAST, "standby", 0)]

    def owner(self, view: str, p: int, max_lag: int) -> Endpoint:
        return self.replicas(view, p, max_lag)[0]

    def assigned(self, view: str, p: int, members: Any = None) -> list[str]:
        return [SLOW, FAST]


def coordinator(delays: dict[str, float]) -> tuple[Coordinator, list[str], list[str]]:
    """Peers answering after ``delays`` seconds (an address missing: never)."""
    membership = StaticMembership(ME)
    node: Any = SimpleNamespace(settings=Settings(auth=False), endpoint=ME, router=Router(),
                                membership=membership, partitions={"v": 3},
                                holds=lambda v, p: False, lag=lambda v, p: -1)
    asked: list[str] = []

    async def send(address: str, body: bytes, deadline: float) -> PeerReply:
        asked.append(address)
        async with asyncio.timeout_at(deadline):
            await asyncio.sleep(delays.get(address, 3600))
        return PeerReply(200, b'{"from":"%s"}' % address.encode())

    return Coordinator(node, send=send), asked, membership.suspected


async def nothing_here(here: Here) -> None:
    raise AssertionError("not held here")


async def test_a_slow_replica_is_hedged_and_the_first_answer_wins() -> None:
    co, asked, suspects = coordinator({FAST: 0.0})
    loop = asyncio.get_running_loop()
    got = await co.route(Ask("lookup", {}, 3, None, loop.time() + 30), False, "v", 0, 10,
                         nothing_here)
    assert isinstance(got, Relayed) and got.address == FAST and asked == [SLOW, FAST]
    hedging = co.peers.hedging
    assert hedging.sent == {"lookup": 1} and hedging.won == {"lookup": 1}
    assert hedging.suspect(SLOW) and not hedging.suspect(FAST)
    assert suspects == []  # slow is not gone: membership is not told
    asked.clear()  # the slow one is now asked last: no hedge delay to pay
    got = await co.route(Ask("lookup", {}, 3, None, loop.time() + 30), False, "v", 0, 10,
                         nothing_here)
    assert isinstance(got, Relayed) and got.address == FAST and asked == [FAST]


async def test_no_hedge_when_the_replica_answers_in_time() -> None:
    co, asked, _ = coordinator({SLOW: 0.0, FAST: 0.0})
    loop = asyncio.get_running_loop()
    for _ in range(20):
        got = await co.route(Ask("lookup", {}, 3, None, loop.time() + 30), False, "v", 0, 10,
                             nothing_here)
        assert isinstance(got, Relayed) and got.address == SLOW
    assert asked == [SLOW] * 20 and co.peers.hedging.sent == {}


async def test_nothing_waits_past_the_deadline() -> None:
    co, _, _ = coordinator({})  # nobody ever answers
    loop = asyncio.get_running_loop()
    got = await co.route(Ask("lookup", {}, 3, None, loop.time() + 0.3), False, "v", 0, 10,
                         nothing_here)
    assert isinstance(got, Refuse) and isinstance(got.error, DeadlineExceeded)
    assert got.error.http_status == 504


def test_hedge_delays_follow_the_measured_latency_within_floor_and_cap() -> None:
    h = Hedging()
    assert h.delay(SLOW, "lookup") == FLOOR_S  # nothing measured yet
    for _ in range(64):
        h.observe(SLOW, "lookup", 0.05)
    assert h.delay(SLOW, "lookup") == 0.05  # the 95th percentile of its answers
    for _ in range(128):
        h.observe(SLOW, "lookup", 5.0)
    assert h.delay(SLOW, "lookup") == ONE_CAP_S  # a stalled peer costs at most the cap
    assert h.delay(SLOW, "aggregate", gather=True) == FLOOR_S  # per kind
    for _ in range(64):
        h.observe(FAST, "lookup", 0.03)
    # the best peer's percentile: a slow peer does not teach the node to wait for it
    assert h.delay(SLOW, "lookup") == h.delay(FAST, "lookup") == 0.03


async def test_a_hedge_that_cannot_read_the_cut_leaves_the_slow_replica_its_answer() -> None:
    """A consistent scan's page: the replica holding the cut's versions is slow, the hedge
    (a replica that kept none) says CutMoved at once; the slow one's answer wins, where
    the hedge's refusal used to fail the read (a CI run at load 51)."""
    membership = StaticMembership(ME)
    node: Any = SimpleNamespace(settings=Settings(auth=False), endpoint=ME, router=Router(),
                                membership=membership, partitions={"v": 3},
                                holds=lambda v, p: False, lag=lambda v, p: -1)
    moved = CutMoved("the cut is older than the versions kept").render()

    async def send(address: str, body: bytes, deadline: float) -> PeerReply:
        if address == FAST:
            return PeerReply(CutMoved.http_status, moved)
        await asyncio.sleep(0.3)
        return PeerReply(200, b'{"partial": {"rows": 7}, "not_active": []}')

    co = Coordinator(node, send=send)
    loop = asyncio.get_running_loop()
    partials, missing, _ = await co.gather(Ask("scan", {}, 3, None, loop.time() + 30), False,
                                           "v", [0], 10, nothing_held)
    assert partials == [{"rows": 7}] and missing == []
    assert co.peers.hedging.sent == {"scan": 1}  # hedged, and the hedge lost


async def nothing_held(held: list[int]) -> dict[str, int]:
    raise AssertionError("not held here")


def _gathering(replies: dict[str, PeerReply]) -> tuple[Coordinator, list[str]]:
    """A coordinator whose peers answer at once with ``replies``."""
    node: Any = SimpleNamespace(settings=Settings(auth=False), endpoint=ME, router=Router(),
                                membership=StaticMembership(ME), partitions={"v": 3},
                                holds=lambda v, p: False, lag=lambda v, p: -1)
    asked: list[str] = []

    async def send(address: str, body: bytes, deadline: float) -> PeerReply:
        asked.append(address)
        return replies[address]

    return Coordinator(node, send=send), asked


ROWS = PeerReply(200, b'{"partial": {"rows": 7}, "not_active": []}')
NO_VERSIONS = PeerReply(CutMoved.http_status,
                        CutMoved("this replica kept no versions until now").render())


async def test_a_first_replica_without_the_cuts_versions_passes_the_partition_on() -> None:
    """A consistent scan's later page whose first choice kept no versions back to the
    page's cut (a replica made "suspect" reorders them): the next replica, which has
    them, answers, where the read used to be refused ("start the scan again")."""
    co, asked = _gathering({SLOW: NO_VERSIONS, FAST: ROWS})
    loop = asyncio.get_running_loop()
    ask = Ask("scan", {}, 3, None, loop.time() + 30)
    partials, missing, _ = await co.gather(ask, False, "v", [0], 10, nothing_held)
    assert partials == [{"rows": 7}] and missing == []
    assert asked == [SLOW, FAST]


async def test_no_replica_with_the_cuts_versions_is_the_entrys_to_take_a_new_cut() -> None:
    co, asked = _gathering({SLOW: NO_VERSIONS, FAST: NO_VERSIONS})
    loop = asyncio.get_running_loop()
    with pytest.raises(CutMoved, match="kept no versions") as got:
        await co.gather(Ask("scan", {}, 3, None, loop.time() + 30), False, "v", [0], 10,
                        nothing_held)
    assert "lower" not in got.value.extra  # the entry takes a new cut
    assert asked == [SLOW, FAST]  # each asked once: no pause and walk again


async def test_a_lower_cut_is_the_whole_querys_at_once() -> None:
    lower = CutMoved("a record within the cut was folded after one past it",
                     lower="in:0:5").render()
    co, asked = _gathering({SLOW: PeerReply(CutMoved.http_status, lower), FAST: ROWS})
    loop = asyncio.get_running_loop()
    with pytest.raises(CutMoved) as got:
        await co.gather(Ask("scan", {}, 3, None, loop.time() + 30), False, "v", [0], 10,
                        nothing_held)
    assert got.value.extra["lower"] == "in:0:5"
    assert asked == [SLOW]


async def test_a_partition_another_replica_answered_is_not_a_reason_for_a_new_cut() -> None:
    """Partition 0's first replica kept no versions and the next answered it; partition
    1's only replica does not answer: the read is partial (partition 1 missing), not
    sent back for a new cut that would not help partition 1."""
    other = "127.0.0.1:4"

    class TwoPlaces(Router):
        def replicas(self, view: str, p: int, max_lag: int) -> list[Endpoint]:
            return super().replicas(view, p, max_lag) if p == 0 else [
                Endpoint(other, "active", 0)]

    node: Any = SimpleNamespace(settings=Settings(auth=False), endpoint=ME,
                                router=TwoPlaces(), membership=StaticMembership(ME),
                                partitions={"v": 3}, holds=lambda v, p: False,
                                lag=lambda v, p: -1)
    replies = {SLOW: NO_VERSIONS, FAST: ROWS,
               other: PeerReply(503, b'{"code": "UNAVAILABLE", "detail": "down"}')}

    async def send(address: str, body: bytes, deadline: float) -> PeerReply:
        return replies[address]

    co = Coordinator(node, send=send)
    loop = asyncio.get_running_loop()
    partials, missing, _ = await co.gather(Ask("scan", {}, 3, None, loop.time() + 1), False,
                                           "v", [0, 1], 10, nothing_held)
    assert partials == [{"rows": 7}] and missing == [1]
