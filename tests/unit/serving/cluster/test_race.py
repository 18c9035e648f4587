"""The one hedged call of a one-partition request: on an idle pooled connection its first
replica is asked on callbacks (no task); past the hedge delay the next replica is asked
too and the first answer wins; a dropped pooled connection is asked again on a fresh one;
a 421 forgets the cached choice; a hedge that lands here answers (or fails) from here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from streamiq.config import Settings
from streamiq.errors import NotUpToBound
from streamiq.routing.router import Endpoint
from streamiq.serving.cluster import placement as placement_module
from streamiq.serving.cluster.hedge import FLOOR_S
from streamiq.serving.cluster.peers import Ask, PeerReply, Peers
from streamiq.serving.cluster.placement import Here, Placement
from streamiq.serving.cluster.race import Race, Relayed
from streamiq.serving.cluster.traffic import Traffic

ME, A, B = "127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"
_Settle = Callable[[PeerReply | None, Exception | None], None]


class Router:
    global_views: frozenset[str] = frozenset()

    def __init__(self, fresh: list[str]) -> None:
        self.fresh = fresh

    def assigned(self, view: str, p: int) -> list[str]:
        return self.fresh

    def replicas(self, view: str, p: int, max_lag: int) -> list[Endpoint]:
        return [Endpoint(a, "active", 0) for a in self.fresh]

    def owner(self, view: str, p: int, max_lag: int) -> Endpoint | None:
        return Endpoint(self.fresh[0], "active", 0)


class Pooled(Peers):
    """Peers whose pooled connections are scripted: ``scripted[address]`` is the reply of
    a call (after ``delay`` s) or an exception; ``sent``: every request, by way."""

    def __init__(self, scripted: dict[str, tuple[float, PeerReply | Exception]],
                 fetched: dict[str, tuple[float, PeerReply]]) -> None:
        self.sent: list[tuple[str, str]] = []

        async def send(address: str, body: bytes, deadline: float) -> PeerReply:
            self.sent.append(("fetch", address))
            delay, reply = fetched[address]
            await asyncio.sleep(delay)
            return reply

        super().__init__(Settings(auth=False), "mark", lambda a: None, send=send)
        self.scripted = scripted
        self.pooled = True  # the calls below, on "pooled connections"
        self.hop = SimpleNamespace(call=self.call)  # type: ignore[assignment]

    def call(self, address: str, body: bytes, deadline: float, then: _Settle,
             slow: Callable[[], None], hedge_at: float) -> bool:
        if address not in self.scripted:
            return False
        self.sent.append(("call", address))
        delay, reply = self.scripted[address]
        loop = asyncio.get_running_loop()
        timer = loop.call_at(hedge_at, slow) if hedge_at < loop.time() + delay else None

        def settle() -> None:
            if timer is not None:
                timer.cancel()
            if isinstance(reply, Exception):
                then(None, reply)
            else:
                then(reply, None)
        loop.call_later(delay, settle)
        return True


def racing(peers: Pooled, fresh: list[str], held: bool = False,
           local: Any = None) -> tuple[Placement, Callable[[list[str]], Any]]:
    node: Any = SimpleNamespace(endpoint=ME, partitions={"v": 1}, router=Router(fresh),
                                holds=lambda v, p: held, lag=lambda v, p: 0 if held else -1)
    placement = Placement(node, Traffic(), hedging=peers.hedging)

    async def nothing_here(here: Here) -> None:
        raise AssertionError("not held here")

    async def run(tried: list[str]) -> Any:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        calls: list[Any] = []

        def then(got: Any, exc: BaseException | None) -> None:
            calls.append((got, exc))
            if not done.done():
                done.set_result((got, exc))

        Race(peers, placement, placement.traffic, Ask("lookup", {}, 1, None, loop.time() + 30),
             "v", 0, 10, tried, local or nothing_here, then, loop)
        got = await done
        await asyncio.sleep(0.3)  # a late leg must not answer again
        assert len(calls) == 1
        return got
    return placement, run


async def test_a_pooled_first_replica_in_time_answers_on_callbacks() -> None:
    peers = Pooled({A: (0.0, PeerReply(200, b"a"))}, {})
    _, run = racing(peers, [A, B])
    tasks = len(asyncio.all_tasks())
    got, exc = await run([A])
    assert exc is None and got == Relayed(A, PeerReply(200, b"a"))
    assert peers.sent == [("call", A)] and peers.hedging.sent == {}
    assert len(asyncio.all_tasks()) == tasks


async def test_a_slow_pooled_replica_is_hedged_and_the_first_answer_wins() -> None:
    peers = Pooled({A: (0.2, PeerReply(200, b"a"))}, {B: (0.0, PeerReply(200, b"b"))})
    _, run = racing(peers, [A, B])
    got, exc = await run([A])
    assert exc is None and got == Relayed(B, PeerReply(200, b"b"))
    assert peers.sent == [("call", A), ("fetch", B)]
    assert peers.hedging.sent == {"lookup": 1} and peers.hedging.won == {"lookup": 1}
    assert peers.hedging.suspect(A)


async def test_a_dropped_pooled_connection_is_asked_again_on_a_fresh_one() -> None:
    peers = Pooled({A: (0.0, ConnectionResetError())}, {A: (0.0, PeerReply(200, b"a"))})
    _, run = racing(peers, [A, B])
    got, exc = await run([A])
    assert exc is None and got == Relayed(A, PeerReply(200, b"a"))
    assert peers.sent == [("call", A), ("fetch", A)] and peers.hedging.sent == {}


async def test_a_421_is_no_answer_and_the_cached_choice_is_forgotten(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(placement_module, "_ROUTE_TTL", 3600.0)  # only forget() moves it
    peers = Pooled({A: (0.0, PeerReply(421, b"{}"))}, {})
    placement, run = racing(peers, [A, B])
    assert placement.preferred("v", 0, 10) == A
    node: Any = placement.node
    node.router.fresh = [B, A]  # the cache still says A
    got, exc = await run([A])
    assert (got, exc) == (None, None)  # the caller walks on (Coordinator.route)
    assert placement.preferred("v", 0, 10) == B  # chosen again


async def test_both_legs_failing_is_no_answer_once_both_are_done() -> None:
    peers = Pooled({A: (0.2, PeerReply(421, b"{}"))}, {B: (0.0, PeerReply(421, b"{}"))})
    _, run = racing(peers, [A, B])
    got, exc = await run([A])
    assert (got, exc) == (None, None)
    assert peers.sent == [("call", A), ("fetch", B)]


async def test_a_hedge_that_lands_here_answers_or_fails_from_here() -> None:
    async def here(h: Here) -> str:
        return "local"

    async def not_yet(h: Here) -> str:
        raise NotUpToBound("not yet")

    peers = Pooled({A: (0.5, PeerReply(200, b"a"))}, {})
    _, run = racing(peers, [A, ME], held=True, local=here)
    assert await run([A]) == ("local", None)
    _, run = racing(Pooled({A: (0.5, PeerReply(200, b"a"))}, {}), [A, ME], held=True,
                    local=not_yet)
    got, exc = await run([A])
    assert got is None and isinstance(exc, NotUpToBound)


async def test_nobody_else_to_ask_waits_for_the_first() -> None:
    peers = Pooled({A: (FLOOR_S * 5, PeerReply(200, b"a"))}, {})
    _, run = racing(peers, [A])
    got, exc = await run([A])
    assert exc is None and got == Relayed(A, PeerReply(200, b"a"))
    assert peers.hedging.sent == {}


@pytest.mark.parametrize("pooled", [True, False])
async def test_a_cancelled_race_stops_its_legs(pooled: bool) -> None:
    peers = Pooled({A: (3600.0, PeerReply(200, b"a"))} if pooled else {},
                   {A: (3600.0, PeerReply(200, b"a")), B: (3600.0, PeerReply(200, b"b"))})
    placement, _ = racing(peers, [A, B])
    loop = asyncio.get_running_loop()
    calls: list[Any] = []
    race: Race[None] = Race(peers, placement, placement.traffic,
                            Ask("lookup", {}, 1, None, loop.time() + 30), "v", 0, 10, [A],
                            lambda h: asyncio.sleep(0), lambda *a: calls.append(a), loop)
    await asyncio.sleep(0.15)  # past the hedge point: B is asked too
    race.cancel()
    await asyncio.sleep(0)
    assert calls == [] and race.done
    assert all(t.done() for t in race._legs)
