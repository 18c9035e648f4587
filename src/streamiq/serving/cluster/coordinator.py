"""Request routing between nodes: key routing and partition-exact scatter-gather.

A request from a client may be answered locally, forwarded to one replica (key
lookups, a key's windows) or split by partition across replicas (multi-get, scans,
aggregates, top-k), each over the peer protocol (``peers.py``). A peer's request names
the partitions it must answer; a node never forwards a peer's request, so there are no
call cycles, and it answers NOT_ACTIVE (421) for a partition it does not hold instead
of "not found". Each partition is answered exactly once, by one replica; partitions no
replica could answer are returned as ``missing`` so the caller reports PARTIAL. A
replica that refuses the client's token (401, 403: it expired on the way) refuses the
whole query, as the entry would: the partitions are not unreachable.

A replica that has not answered within its hedge delay (``hedge.py``) is not waited
for alone: the same request goes to the next replica, the first answer wins, and the
slow one is asked last for a while; every call to a replica is made hedged by
``race.py`` (``Race``: one partition's; ``Parts``: a scatter-gather's part). Every
request carries what is left of the caller's budget (``Ask.deadline``); nothing waits
past it. When every replica of a partition was
asked and none answered (a connection not accepted within its timeout on a loaded
machine, a 421 from a replica whose heartbeat is behind), they are walked again after a
pause (``RETRY_S``, doubling to ``RETRY_MAX_S``) while the budget lasts: a moment of
slowness is not a 503 for a client that gave the query seconds. A replica that is gone
(refused the connection) is suspected and not walked again, so a partition nobody can
serve is still refused at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from prometheus_client.core import Metric

from streamiq.errors import (
    DeadlineExceeded,
)
from streamiq.serving.cluster.gate import Gate
from streamiq.serving.cluster.metrics import coordinator_metrics
from streamiq.serving.cluster.peers import Ask, Peers, Send
from streamiq.serving.cluster.placement import (
    Here,
    Placement,
    Redirect,
    Refuse,
)
from streamiq.serving.cluster.race import Parts, Race, Relayed, Then
from streamiq.serving.cluster.traffic import Traffic, log_summaries
from streamiq.serving.engines.partials import P
from streamiq.serving.node import Node

__all__ = ["RETRY_MAX_S", "RETRY_S", "Coordinator", "Relayed"]

log = logging.getLogger("streamiq.routing")


#: the pause before replicas that all failed are walked again, doubling up to the max
RETRY_S = 0.05
RETRY_MAX_S = 1.0

T = TypeVar("T")


class Coordinator:
    """Carries a query where it is answered, made of one part per job: the
    authentication gate (``gate.py``), the calls to peers (``peers.py``), the placement
    (``placement.py``), the admission of peers' requests (``peer_slots``) and the
    traffic counts (``traffic.py``). Callers use the parts themselves
    (``coordinator.gate.check``, ``coordinator.peers.hop``, ``coordinator.placement.role``).
    It knows no web framework: what it asks peers is an ``Ask`` rendered from the typed
    query (``serving/query/``)."""

    def __init__(self, node: Node, send: Send | None = None) -> None:
        self.node = node
        s = node.settings
        self.gate = Gate(s)
        self.peers = Peers(s, self.gate.mark, lambda address: node.membership.suspect(address),
                           send=send)
        # admission: forwarded requests from peers served at once (--internal-concurrency)
        self.peer_slots = asyncio.Semaphore(s.internal_concurrency)
        self.traffic = Traffic()  # counted, not logged, per answer (serving/cluster/traffic.py)
        # where a one-partition request is answered (serving/cluster/placement.py)
        self.placement = Placement(node, self.traffic, redirect=s.redirect,
                                   hedging=self.peers.hedging)
        self.parts = Parts(node.endpoint, lambda v, p: node.holds(v, p), self.peers,
                           self.placement)
        self._summaries: asyncio.Task[None] | None = None

    def metrics(self) -> Iterator[Metric]:
        """Its part of the node's ``/metrics`` (``metrics.py``)."""
        return coordinator_metrics(self.traffic, self.peers)

    def start(self, summary_period_s: float = 60.0) -> None:
        """Start the periodic traffic summary line (one per period with traffic)."""
        self._summaries = self.node.supervisor.task(
            "traffic-summary", lambda: log_summaries(self.traffic, summary_period_s))

    async def close(self) -> None:
        if self._summaries is not None:
            self._summaries.cancel()
        await self.peers.close()

    # -- one partition (key lookups, a key's windows) --
    def race(self, ask: Ask, view: str, partition: int, max_lag: int, tried: list[str],
             local: Callable[[Here], Awaitable[T]], then: Then,
             loop: asyncio.AbstractEventLoop | None = None,
             walk: Callable[[], Coroutine[Any, Any, Any]] | None = None) -> Race[T]:
        """The one hedged call of a one-partition request (``race.py``): ``tried[-1]``
        asked at once. ``loop``: the running one, when the caller has it at hand;
        ``walk``: run when no replica it asked answered (``Race``)."""
        return Race(self.peers, self.placement, self.traffic, ask, view, partition, max_lag,
                    tried, local, then, loop or asyncio.get_running_loop(), walk)

    async def route(self, ask: Ask, forwarded: bool, view: str, partition: int, max_lag: int,
                    local: Callable[[Here], Awaitable[T]], tried: list[str] | None = None
                    ) -> T | Relayed | Redirect | Refuse:
        """Answer where ``Placement.place`` says: here (``local``'s answer), forwarded to
        one replica after another, each by the hedged call (``race.py``: a 421 or an
        unreachable one, the next; a slow one, the next as well, the first answer
        winning; the reply ``Relayed``), or the ``Redirect`` or ``Refuse`` (421 to a
        peer, 503, 504 past the deadline) decided. ``tried``: replicas already asked
        (the lean path's race), not asked again. The first ask is the placement's cached
        preferred replica, as the lean path's."""
        tried = [] if tried is None else tried
        loop = asyncio.get_running_loop()
        rounds = 0
        while True:
            if loop.time() >= ask.deadline:
                return Refuse(DeadlineExceeded(f"no answer for {view} partition {partition} "
                                               f"within the budget", tried=list(tried)))
            d = (self.placement.for_peer(view, partition) if forwarded
                 else self.placement.place(view, partition, max_lag, tried))
            if isinstance(d, Here):
                if not forwarded:
                    return await local(d)
                async with self.peer_slots:  # requests served for peers at once
                    return await local(d)
            if isinstance(d, Refuse) and self._again(ask, tried) and await _pause(ask, rounds):
                rounds += 1  # every replica was asked and none answered: once more
                tried = sorted(ask.gone)
                continue
            if isinstance(d, Refuse):
                self.traffic.refused(d.error.http_status)
            if isinstance(d, Redirect | Refuse):
                return d
            got = await self._race(ask, view, partition, max_lag, tried, local)  # d.address
            if got is not None:
                return got

    def _again(self, ask: Ask, asked: Iterable[str]) -> bool:
        """Some peer asked did not answer but is not gone: worth asking again."""
        return any(a not in ask.gone and a != self.node.endpoint for a in asked)

    async def _race(self, ask: Ask, view: str, partition: int, max_lag: int,
                    tried: list[str], local: Callable[[Here], Awaitable[T]]
                    ) -> T | Relayed | None:
        """The hedged call's outcome, awaited (None: no replica it asked answered)."""
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def then(got: Any, exc: BaseException | None) -> None:
            if not done.done():
                done.set_result(got) if exc is None else done.set_exception(exc)

        race = self.race(ask, view, partition, max_lag, tried, local, then)
        try:
            return await done  # type: ignore[no-any-return]
        finally:
            race.cancel()

    # -- many partitions (scatter-gather) --
    async def gather(self, ask: Ask, forwarded: bool, view: str, partitions: Sequence[int],
                     max_lag: int, local: Callable[[list[int]], Awaitable[P]]
                     ) -> tuple[list[P], list[int], int]:
        """Answer each partition exactly once; return (partials, missing, hops). A
        ``forwarded`` query (a peer's) is answered here only, for what this node holds."""
        if forwarded:
            self.traffic.for_peers += 1
            async with self.peer_slots:
                held = [p for p in partitions if self.node.holds(view, p)]
                part = await local(held)
            missing = [p for p in partitions if p not in held]
            return [part], missing, 0
        self.traffic.fanout += 1
        pending = list(partitions)
        excluded: dict[int, set[str]] = defaultdict(set)
        partials: list[P] = []
        hops = 0
        loop = asyncio.get_running_loop()
        rounds = 0
        while True:
            plan = self.placement.plan(view, pending, max_lag, excluded)
            unplanned = [p for p in pending if not any(p in ps for ps in plan.values())]
            calls = [self.parts.part(view, addr, ps, ask, local, max_lag, excluded)
                     for addr, ps in plan.items()]
            results = await asyncio.gather(*calls)
            pending = unplanned
            for addr, (got, not_done) in zip(plan, results, strict=True):
                if got:
                    partials += got
                    hops = max(hops, 0 if addr == self.node.endpoint else 1)
                for p in not_done:
                    excluded[p].add(addr)
                pending += not_done
            if not pending or loop.time() >= ask.deadline:
                break
            if not any(plan.values()):  # every replica left was asked: once more, later
                unread = [ask.unread[p] for p in pending if p in ask.unread]
                if unread:  # unless one refused for the versions of the cut: a new cut
                    raise unread[-1]
                if not any(self._again(ask, excluded[p]) for p in pending) or \
                        not await _pause(ask, rounds):
                    break
                rounds += 1
                excluded = defaultdict(set, {p: set(ask.gone) for p in pending})
        return partials, sorted(set(pending)), hops

async def _pause(ask: Ask, rounds: int) -> bool:
    """Sleep before walking the replicas again (False, at once: too little budget)."""
    loop = asyncio.get_running_loop()
    delay = min(RETRY_S * 2 ** rounds, RETRY_MAX_S)
    if ask.deadline - loop.time() <= 2 * delay:
        return False
    await asyncio.sleep(delay)
    return True
