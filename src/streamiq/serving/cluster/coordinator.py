"""Request routing between nodes: key routing and partition-exact scatter-gather.

A request from a client may be answered locally, forwarded to one replica (key
lookups) or split by partition across replicas (multi-get, scans, aggregates). A
forwarded request carries the ``X-Streamiq-Forwarded`` mark and the explicit
``partitions`` it must answer; a node never forwards a marked request, so there are no
call cycles, and it answers NOT_ACTIVE (421) for a partition it does not hold instead
of "not found". Each partition is answered exactly once, by one replica; partitions
no replica could answer are returned as ``missing`` so the caller reports PARTIAL. A
replica that refuses the client's token (401, 403: it expired on the way) refuses the
whole query, as the entry would: the partitions are not unreachable.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import AnyStr, NamedTuple, TypeVar

from streamiq.errors import BadRequest, Forbidden, PeerError, Unauthenticated
from streamiq.routing.router import Endpoint
from streamiq.serving.cluster.gate import Gate
from streamiq.serving.cluster.peers import Ask, Peers, Reply, Send
from streamiq.serving.cluster.placement import Here, Placement, Redirect, Refuse
from streamiq.serving.cluster.traffic import Traffic, log_summaries
from streamiq.serving.engines.partials import GatherReply, P
from streamiq.serving.node import Node

__all__ = ["HOPS", "SERVED_BY", "Coordinator", "Relayed", "relayed_headers"]

log = logging.getLogger("streamiq.routing")

HOPS = "x-streamiq-hops"
SERVED_BY = "x-streamiq-served-by"

T = TypeVar("T")
#: a peer's refusal of the query itself (not of its partitions), raised as its error
_REFUSED: dict[int, type[BadRequest | Unauthenticated | Forbidden]] = {
    400: BadRequest, 401: Unauthenticated, 403: Forbidden}


def relayed_headers(headers: Mapping[AnyStr, AnyStr], prefix: AnyStr, hops: AnyStr
                    ) -> list[tuple[AnyStr, AnyStr]]:
    """The owner's ``x-streamiq-*`` headers an entry relays to its client (all but the
    hop count, which the entry sets); ``prefix`` and ``hops`` as str or bytes."""
    return [(k, v) for k, v in headers.items() if k.startswith(prefix) and k != hops]


class Relayed(NamedTuple):
    """A one-partition query a replica answered: its reply, relayed as it came."""

    address: str
    reply: Reply


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
        self.placement = Placement(node, self.traffic, redirect=s.redirect)
        self._summaries: asyncio.Task[None] | None = None

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
                    local: Callable[[Here], Awaitable[T]]) -> T | Relayed | Redirect | Refuse:
        """Answer where ``Placement.place`` says: here (``local``'s answer), forwarded to
        one replica after another (a 421 or an unreachable one: the next; the reply
        ``Relayed``), or the ``Redirect`` or ``Refuse`` (421 to a peer, 503) decided."""
        tried: list[str] = []
        while True:
            d = self.placement.place(view, partition, max_lag, forwarded, tried)
            if isinstance(d, Here):
                if not forwarded:
                    return await local(d)
                async with self.peer_slots:  # requests served for peers at once
                    return await local(d)
            if isinstance(d, Redirect | Refuse):
                return d
            try:
                r = await self.peers.send(d.address, ask)
            except PeerError as err:
                self.peers.unreachable(err)
                continue
            if r.status_code == 421:
                continue
            self.traffic.forwarded_to(d.address)
            return Relayed(d.address, r)

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
        partials: list[P | None] = []
        hops = 0
        for _attempt in range(3):
            plan = self._plan(view, pending, max_lag, excluded)
            unplanned = [p for p in pending if not any(p in ps for ps in plan.values())]
            calls = [self._gather_one(view, addr, ps, ask, local) for addr, ps in plan.items()]
            results = await asyncio.gather(*calls)
            pending = unplanned
            for addr, (got, not_done) in zip(plan, results, strict=True):
                if got is not None:
                    partials.append(got)
                    hops = max(hops, 0 if addr == self.node.endpoint else 1)
                for p in not_done:
                    excluded[p].add(addr)
                pending += not_done
            if not pending or not any(plan.values()):
                break
        return [p for p in partials if p is not None], sorted(set(pending)), hops

    def _plan(self, view: str, partitions: Sequence[int], max_lag: int,
              excluded: dict[int, set[str]]) -> dict[str, list[int]]:
        plan: dict[str, list[int]] = defaultdict(list)
        me = self.node.endpoint
        here_first = view in self.node.router.global_views  # held whole here: no hop
        for p in partitions:
            eps: list[Endpoint] = self.node.router.replicas(view, p, max_lag)
            if here_first:
                eps.sort(key=lambda e: e.address != me)
            choice = next((e for e in eps if e.address not in excluded[p]), None)
            if choice is not None:
                plan[choice.address].append(p)
        return dict(plan)

    async def _gather_one(self, view: str, address: str, parts: list[int], ask: Ask,
                          local: Callable[[list[int]], Awaitable[P]]
                          ) -> tuple[P | None, list[int]]:
        if address == self.node.endpoint:
            held = [p for p in parts if self.node.holds(view, p)]
            part = await local(held)
            return part, [p for p in parts if p not in held]
        try:
            r = await self.peers.send(address, ask, parts)
        except PeerError as err:
            self.peers.unreachable(err)
            return None, parts
        if r.status_code in _REFUSED:  # the query itself is refused (it would be here too)
            raise _REFUSED[r.status_code](str(r.json().get("detail", "refused by a peer")),
                                          peer=address)
        if r.status_code != 200:
            return None, parts
        doc: GatherReply[P] = r.json()
        return doc.get("partial"), [int(p) for p in doc.get("not_active", [])]
