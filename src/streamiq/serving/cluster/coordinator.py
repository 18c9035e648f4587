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
slow one is asked last for a while. Every request carries what is left of the caller's
budget (``Ask.deadline``); nothing waits past it. When every replica of a partition was
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
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple, TypeVar

import orjson
from prometheus_client.core import Metric

from streamiq.errors import (
    BadRequest,
    CutMoved,
    DeadlineExceeded,
    Forbidden,
    PeerError,
    StreamiqError,
    Unauthenticated,
    from_problem,
)
from streamiq.serving.cluster.gate import Gate
from streamiq.serving.cluster.metrics import coordinator_metrics
from streamiq.serving.cluster.peers import Ask, PeerReply, Peers, Send
from streamiq.serving.cluster.placement import (
    Decision,
    Forward,
    Here,
    Placement,
    Redirect,
    Refuse,
)
from streamiq.serving.cluster.traffic import Traffic, log_summaries
from streamiq.serving.engines.partials import GatherReply, P
from streamiq.serving.node import Node

__all__ = ["RETRY_MAX_S", "RETRY_S", "Coordinator", "Relayed"]

log = logging.getLogger("streamiq.routing")


#: the pause before replicas that all failed are walked again, doubling up to the max
RETRY_S = 0.05
RETRY_MAX_S = 1.0

T = TypeVar("T")
_Part = tuple[list[P], list[int]]  # a part's partials, and the partitions it did not answer
#: a peer's refusal of the query itself (not of its partitions), raised as its error
_REFUSED: dict[int, type[BadRequest | Unauthenticated | Forbidden]] = {
    400: BadRequest, 401: Unauthenticated, 403: Forbidden}


class Relayed(NamedTuple):
    """A one-partition query a replica answered: its typed reply (``status``, ``body``)."""

    address: str
    reply: PeerReply


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
    async def route(self, ask: Ask, forwarded: bool, view: str, partition: int, max_lag: int,
                    local: Callable[[Here], Awaitable[T]], first: str | None = None
                    ) -> T | Relayed | Redirect | Refuse:
        """Answer where ``Placement.place`` says: here (``local``'s answer), forwarded to
        one replica after another (a 421 or an unreachable one: the next; a slow one:
        the next as well, the first answer winning; the reply ``Relayed``), or the
        ``Redirect`` or ``Refuse`` (421 to a peer, 503, 504 past the deadline) decided.
        ``first``: the replica already chosen (the lean path's cached choice), asked
        before any other. The first ask is the placement's cached preferred replica, as
        the lean path's; when it cannot answer, it is chosen again next time."""
        tried: list[str] = []
        loop = asyncio.get_running_loop()
        rounds = 0
        while True:
            if loop.time() >= ask.deadline:
                return Refuse(DeadlineExceeded(f"no answer for {view} partition {partition} "
                                               f"within the budget", tried=list(tried)))
            if first is not None:
                d: Decision = Forward(first)
                tried.append(first)
            else:
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
            got = await self._race(ask, view, partition, max_lag, d.address, tried, local)
            if got is not None:
                return got
            if first is not None or tried == [d.address]:  # the first choice (the cached
                self.placement.forget(view, partition, max_lag)  # preferred one) failed
                first = None

    def _again(self, ask: Ask, asked: Iterable[str]) -> bool:
        """Some peer asked did not answer but is not gone: worth asking again."""
        return any(a not in ask.gone and a != self.node.endpoint for a in asked)

    async def _race(self, ask: Ask, view: str, partition: int, max_lag: int, first: str,
                    tried: list[str], local: Callable[[Here], Awaitable[T]]
                    ) -> T | Relayed | None:
        """``first``'s answer, or, when it is slower than its hedge delay, the first
        answer of it and the next replica (None: neither could answer)."""
        hedging = self.peers.hedging
        a: asyncio.Future[Any] = asyncio.ensure_future(self._one(first, ask, partition))
        done, _ = await asyncio.wait({a}, timeout=hedging.delay(first, ask.kind))
        if done:
            return a.result()  # type: ignore[no-any-return]
        d = self.placement.place(view, partition, max_lag, tried)
        if not isinstance(d, Forward | Here):
            return await a  # type: ignore[no-any-return]  # nobody else: wait (the deadline)
        hedging.hedged(ask.kind, first)
        b: asyncio.Future[Any] = asyncio.ensure_future(
            local(d) if isinstance(d, Here) else self._one(d.address, ask, partition))
        pending: set[asyncio.Future[Any]] = {a, b}
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for f in done:
                    if f.result() is not None:
                        if f is b:
                            hedging.hedge_won(ask.kind)
                        return f.result()  # type: ignore[no-any-return]
            return None
        finally:
            for f in pending:
                f.cancel()

    async def _one(self, address: str, ask: Ask, partition: int) -> Relayed | None:
        """``address``'s reply (None: unreachable, or it does not hold the partition)."""
        try:
            r = await self.peers.ask(address, ask, [partition])
        except PeerError as err:
            self.peers.unreachable(err)
            return None
        if r.status == 421:
            return None
        self.traffic.forwarded_to(address)
        return Relayed(address, r)

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
            calls = [self._part(view, addr, ps, ask, local, max_lag, excluded)
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

    async def _part(self, view: str, address: str, parts: list[int], ask: Ask,
                    local: Callable[[list[int]], Awaitable[P]], max_lag: int,
                    excluded: dict[int, set[str]]) -> _Part[P]:
        """One replica's part; when it is slower than its hedge delay, the same
        partitions are asked of the next replicas too, and the first whole answer wins."""
        if address == self.node.endpoint:
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
            self._peer_part(addr, ps, ask) if addr != self.node.endpoint
            else self._local_part(view, ps, local, ask) for addr, ps in plan.items()]
        results = await asyncio.gather(*calls)
        planned = {p for ps in plan.values() for p in ps}
        got = [x for r in results for x in r[0]]
        return got, [p for r in results for p in r[1]] + [p for p in parts if p not in planned]

    async def _local_part(self, view: str, parts: list[int],
                          local: Callable[[list[int]], Awaitable[P]], ask: Ask) -> _Part[P]:
        held = [p for p in parts if self.node.holds(view, p)]
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


async def _pause(ask: Ask, rounds: int) -> bool:
    """Sleep before walking the replicas again (False, at once: too little budget)."""
    loop = asyncio.get_running_loop()
    delay = min(RETRY_S * 2 ** rounds, RETRY_MAX_S)
    if ask.deadline - loop.time() <= 2 * delay:
        return False
    await asyncio.sleep(delay)
    return True
