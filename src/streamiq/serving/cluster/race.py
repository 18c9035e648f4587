"""The hedged calls to replicas, the one place a hedge is sent: a request's first
replica, and past that replica's hedge delay (``hedge.py``) the next one too; the first
answer wins.

``Race`` is the one hedged call of a one-partition request (a key lookup, a key's
windows). Every such request goes through it: the lean path's forwarded lookup
(``Queries.forward``) and each step of ``Coordinator.route``'s walk over the replicas.
``Parts`` is a scatter-gather's part (``Coordinator.gather``), its partitions hedged to
the next replicas as a group (at the gather cap: a part's own work can take long).

It runs on callbacks, in the style the measurements asked for (bench/bench_queries.py):
on an idle pooled connection, the first replica's request and its hedge point are one
frame written and one timer of that connection (``HopClient.call``), and its reply goes
straight to ``then``: no task, no future. Otherwise (no idle connection, a pooled one the
peer had dropped, the hedge) each leg is a task asking through ``Peers.ask``.

A leg answers a ``Relayed`` reply, or nothing: the replica does not hold the partition
(421) or could not be reached (counted and suspected as ``Peers`` says). When neither leg
answered, ``then`` gets None and the caller walks on (``Coordinator.route``); the cached
preferred replica that failed is forgotten (``Placement.forget``). A leg's exception (the
local answer's error, e.g. a position not reached) is the race's outcome.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, NamedTuple, TypeVar

import orjson

from streamiq.errors import (
    BadRequest,
    CutMoved,
    Forbidden,
    PeerError,
    StreamiqError,
    Unauthenticated,
    from_problem,
)
from streamiq.serving.cluster.peers import Ask, PeerReply, Peers
from streamiq.serving.cluster.placement import Forward, Here, Placement
from streamiq.serving.cluster.traffic import Traffic
from streamiq.serving.engines.partials import GatherReply, P

__all__ = ["Parts", "Race", "Relayed", "Then"]

log = logging.getLogger("streamiq.routing")

T = TypeVar("T")
_Part = tuple[list[P], list[int]]  # a part's partials, and the partitions it did not answer
#: a peer's refusal of the query itself (not of its partitions), raised as its error
_REFUSED: dict[int, type[BadRequest | Unauthenticated | Forbidden]] = {
    400: BadRequest, 401: Unauthenticated, 403: Forbidden}
#: the race's outcome: an answer (None: no replica asked answered), or the exception
Then = Callable[[Any, BaseException | None], None]


class Relayed(NamedTuple):
    """A one-partition query a replica answered: its typed reply (``status``, ``body``)."""

    address: str
    reply: PeerReply


class Race(Generic[T]):
    """One partition's request, hedged: ``Race(...)`` asks at once; ``then(answer, exc)``
    runs once (``Relayed``, ``local``'s answer when the hedge lands here, or None; with
    ``walk``, instead of None, what ``walk()`` answers: the caller's walk over the other
    replicas, ``tried`` skipped)."""

    __slots__ = ("_legs", "_out", "_preferred", "_timer", "ask", "done", "first", "hedged", "local",
                 "loop", "max_lag", "partition", "peers", "placement", "t0", "then", "traffic",
                 "tried", "view", "walk")

    def __init__(self, peers: Peers, placement: Placement, traffic: Traffic, ask: Ask,
                 view: str, partition: int, max_lag: int, tried: list[str],
                 local: Callable[[Here], Awaitable[T]], then: Then,
                 loop: asyncio.AbstractEventLoop,
                 walk: Callable[[], Coroutine[Any, Any, Any]] | None = None) -> None:
        """Ask ``tried[-1]`` (the replica placement chose last) at once."""
        self.peers, self.placement, self.traffic = peers, placement, traffic
        self.ask, self.view, self.partition, self.max_lag = ask, view, partition, max_lag
        self.tried, self.local, self.then, self.loop = tried, local, then, loop
        self.walk = walk
        self.done = self.hedged = False
        self._legs: tuple[asyncio.Task[Any], ...] = ()  # the legs that are tasks
        self._timer: asyncio.TimerHandle | None = None
        self.first = first = tried[-1]
        self._preferred = len(tried) == 1  # the placement's cached first choice
        self._out = 1  # legs in flight (the pooled call's included)
        self.t0 = now = loop.time()
        hedge_at = now + peers.hedging.delay(first, ask.kind)
        if not (peers.pooled and peers.hop.call(first, ask.body([partition]), ask.deadline,
                                                self._replied, self._slow, hedge_at)):
            self._fetch(first, hedge_at)

    def cancel(self) -> None:
        """The caller no longer waits: every leg stops."""
        self._end(None, None, notify=False)

    # -- the first replica --
    def _replied(self, reply: PeerReply | None, exc: Exception | None) -> None:
        """Its reply on the pooled connection (or that connection's failure)."""
        if reply is not None:
            if reply.status != 421 and not self.done:  # the usual: the answer, first
                self.done = True
                self.traffic.forwarded_to(self.first)
                if self._timer is not None or self._legs:
                    self._stop()
                try:
                    self.then(Relayed(self.first, reply), None)
                except Exception:
                    log.exception("a one-partition answer's handler failed")
            else:
                self._answered(self._relayed(self.first, reply), hedge=False)
            self.peers.hedging.observe(self.first, self.ask.kind, self.loop.time() - self.t0)
        elif not self.done:  # a pooled connection the peer had dropped: a fresh one
            self._fetch(self.first, None if self.hedged else self.t0 + self.peers.hedging
                        .delay(self.first, self.ask.kind))

    def _fetch(self, address: str, hedge_at: float | None) -> None:
        """The first replica's request as a task (connecting if it must)."""
        self._legs += (self.loop.create_task(self._leg(self._one(address), hedge=False)),)
        if hedge_at is not None and self._timer is None:
            self._timer = self.loop.call_at(hedge_at, self._slow)

    # -- the hedge --
    def _slow(self) -> None:
        """The first replica is past its hedge delay: the next one is asked too."""
        self._timer = None
        if self.done or self.hedged:
            return
        d = self.placement.place(self.view, self.partition, self.max_lag, self.tried)
        if not isinstance(d, Forward | Here):
            return  # nobody else could answer: wait for the first (until the deadline)
        self.hedged = True
        self._out += 1
        self.peers.hedging.hedged(self.ask.kind, self.first)
        answer = self.local(d) if isinstance(d, Here) else self._one(d.address)
        self._legs += (self.loop.create_task(self._leg(answer, hedge=True)),)

    # -- the legs' answers --
    async def _one(self, address: str) -> Relayed | None:
        """``address``'s reply (None: unreachable, or it does not hold the partition)."""
        try:
            r = await self.peers.ask(address, self.ask, [self.partition])
        except PeerError as err:
            self.peers.unreachable(err)
            return None
        return self._relayed(address, r)

    def _relayed(self, address: str, r: PeerReply) -> Relayed | None:
        if r.status == 421:
            return None
        self.traffic.forwarded_to(address)
        return Relayed(address, r)

    async def _leg(self, answer: Awaitable[Any], hedge: bool) -> None:
        try:
            got = await answer
        except Exception as exc:  # the local answer's error is the race's outcome
            self._end(None, exc)
            return
        self._answered(got, hedge)

    def _answered(self, got: Any, hedge: bool) -> None:
        if self.done:
            return
        if got is not None:
            if hedge:
                self.peers.hedging.hedge_won(self.ask.kind)
            self._end(got, None)
            return
        if not hedge and self._preferred:
            self.placement.forget(self.view, self.partition, self.max_lag)
            self._preferred = False
        self._out -= 1
        if self._out <= 0:  # else the other leg may still answer
            self._end(None, None)

    def _end(self, got: Any, exc: BaseException | None, notify: bool = True) -> None:
        if self.done:
            return
        self.done = True
        self._stop()
        if not notify:
            return
        if got is None and exc is None and self.walk is not None:
            walk = self.loop.create_task(self.walk())
            walk.add_done_callback(self._walked)
            return
        self._notify(got, exc)

    def _stop(self) -> None:
        """Every leg still running, and the hedge point, cancelled."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        current = asyncio.current_task() if self._legs else None
        for t in self._legs:
            if t is not current and not t.done():
                t.cancel()

    def _walked(self, task: asyncio.Task[Any]) -> None:
        exc = asyncio.CancelledError() if task.cancelled() else task.exception()
        self._notify(None if exc is not None else task.result(), exc)

    def _notify(self, got: Any, exc: BaseException | None) -> None:
        try:
            self.then(got, exc)
        except Exception:
            log.exception("a one-partition answer's handler failed")

class Parts:
    """A scatter-gather's parts (``Coordinator.gather``), each hedged: one replica's part,
    and when it is slower than its hedge delay (``hedge.py``, the gather cap), the same
    partitions asked of the next replicas too; the first whole answer wins."""

    def __init__(self, endpoint: str, holds: Callable[[str, int], bool], peers: Peers,
                 placement: Placement) -> None:
        self.endpoint, self.holds = endpoint, holds
        self.peers, self.placement = peers, placement

    async def part(self, view: str, address: str, parts: list[int], ask: Ask,
                   local: Callable[[list[int]], Awaitable[P]], max_lag: int,
                   excluded: dict[int, set[str]]) -> _Part[P]:
        """One replica's part; when it is slower than its hedge delay, the same
        partitions are asked of the next replicas too, and the first whole answer wins."""
        if address == self.endpoint:
            return await self._local_part(view, parts, local, ask)
        hedging = self.peers.hedging
        a: asyncio.Future[_Part[Any]] = asyncio.ensure_future(self._peer_part(address, parts,
                                                                              ask))
        done, _ = await asyncio.wait({a}, timeout=hedging.delay(address, ask.kind, gather=True))
        if done:
            return a.result()
        others = {p: excluded[p] | {address} for p in parts}
        plan = self.placement.plan(view, parts, max_lag, others)
        if not plan:
            return await a
        hedging.hedged(ask.kind, address)
        b: asyncio.Future[_Part[Any]] = asyncio.ensure_future(self._hedge(view, plan, parts,
                                                                          ask, local))
        try:
            done, _ = await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
            if a in done and not a.result()[1]:
                return a.result()
            if a not in done and (b.exception() is not None or b.result()[1]):
                # the hedge failed or left partitions unanswered (a replica without the
                # versions of the query's cut refuses at once): the first replica, merely
                # slow, may answer them
                return await a
            got = await b
            if b in done:
                hedging.hedge_won(ask.kind)
            return got
        finally:
            a.cancel()
            b.cancel()

    async def _hedge(self, view: str, plan: dict[str, list[int]], parts: list[int],
                     ask: Ask, local: Callable[[list[int]], Awaitable[P]]) -> _Part[Any]:
        """The hedge of a slow part: its partitions from the replicas ``plan`` chose."""
        calls: list[Awaitable[_Part[Any]]] = [
            self._peer_part(addr, ps, ask) if addr != self.endpoint
            else self._local_part(view, ps, local, ask) for addr, ps in plan.items()]
        results = await asyncio.gather(*calls)
        planned = {p for ps in plan.values() for p in ps}
        got = [x for r in results for x in r[0]]
        return got, [p for r in results for p in r[1]] + [p for p in parts if p not in planned]

    async def _local_part(self, view: str, parts: list[int],
                          local: Callable[[list[int]], Awaitable[P]], ask: Ask) -> _Part[P]:
        held = [p for p in parts if self.holds(view, p)]
        try:
            return [await local(held)], [p for p in parts if p not in held]
        except CutMoved as moved:
            return self._unread(moved, parts, ask)

    @staticmethod
    def _unread(moved: StreamiqError, parts: list[int], ask: Ask) -> _Part[Any]:
        """A replica's ``CutMoved``: one naming a lower cut is the query's (every replica
        of a partition folded the same rows: the entry asks again lower); one without
        is this replica's (it kept no versions back to the cut): the next is asked."""
        if "lower" in moved.extra:
            raise moved
        assert isinstance(moved, CutMoved)
        ask.unread.update(dict.fromkeys(parts, moved))
        return [], parts

    async def _peer_part(self, address: str, parts: list[int], ask: Ask) -> _Part[Any]:
        try:
            r = await self.peers.ask(address, ask, parts)
        except PeerError as err:
            self.peers.unreachable(err)
            return [], parts
        if r.status in _REFUSED:  # the query itself is refused (it would be here too)
            refused = from_problem(r.status, r.body)
            raise _REFUSED[r.status](refused.message, peer=address)
        if r.status == CutMoved.http_status:  # the query's cut (lower), or this replica's
            return self._unread(from_problem(r.status, r.body), parts, ask)
        if r.status != 200:
            return [], parts
        doc: GatherReply[Any] = orjson.loads(r.body)
        partial = doc.get("partial")
        return ([] if partial is None else [partial]), [int(p) for p in doc.get("not_active", [])]
