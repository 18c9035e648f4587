"""Where a one-partition request is answered: the one decision every entry point uses.

``Placement.place`` says, for a client's request for a partition, whether this node
answers (``Here``, with its role and lag: computed once, for the answer's stamp too),
which replica the request goes to (``Forward``; ``Redirect`` in redirect mode) or why
nobody can answer (``Refuse``: 503 when no replica is fresh enough).
``Placement.for_peer`` says it for a peer's: ``Here``, or ``Refuse`` with a 421 when
this node does not hold the partition; by its type never anything else, so a request
goes at most one hop. The lean path (``serving/http/fastpath.py``) and the full routes
(``Coordinator.route``) ask ``place``, the peer server ``for_peer``; ``Reads.decide``
and ``Reads.answer_peer`` add the store read of a key lookup, once. Transports only
carry what it decided.

Roles are derived from membership at most every ``_ROLE_TTL`` seconds and the preferred
replica at most every ``_ROUTE_TTL`` seconds, so the hot path is a few dict lookups.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from streamiq.errors import NotActive, StreamiqError, Unavailable
from streamiq.serving.cluster.hedge import Hedging
from streamiq.serving.cluster.traffic import Traffic

if TYPE_CHECKING:
    from streamiq.serving.node import Node

__all__ = ["Decision", "Forward", "Here", "Placement", "Redirect", "Refuse", "not_held"]

_ROLE_TTL = 0.05
# how long a forwarding decision is reused: routing asked membership on every lookup; a
# stale one costs a 421 or a refused connection, after which the full route answers
_ROUTE_TTL = 0.1


class Here(NamedTuple):
    """This node answers, as ``role`` ("active", "standby", "previous") ``lag`` behind."""

    role: str
    lag: int


class Forward(NamedTuple):
    """Ask this replica (one hop)."""

    address: str


class Redirect(NamedTuple):
    """Send the client to this replica (redirect mode: 307)."""

    address: str


class Refuse(NamedTuple):
    """Nobody can answer: this error is the answer."""

    error: StreamiqError


Decision = Here | Forward | Redirect | Refuse


def not_held(endpoint: str, view: str, p: int) -> NotActive:
    """The 421 of a request for a partition this node does not hold (ask another)."""
    return NotActive(f"{endpoint} does not hold {view} partition {p}", partition=p)


class Placement:
    """This node's roles and the replicas it forwards to, and ``place``."""

    def __init__(self, node: Node, traffic: Traffic, redirect: bool = False,
                 hedging: Hedging | None = None) -> None:
        self.node = node
        self.traffic = traffic
        self.hedging = hedging or Hedging()  # peers that lost a race are asked last
        self.redirect = redirect
        self._roles: dict[tuple[str, int], str] = {}  # assigned here: "active" or "standby"
        self._roles_at = -1e9
        self._preferred: dict[tuple[str, int, int], tuple[float, str | None]] = {}

    def plan(self, view: str, partitions: Iterable[int], max_lag: int,
             excluded: Mapping[int, Collection[str]] | None = None,
             last: Collection[str] = ()) -> dict[str, list[int]]:
        """The one replica planner of every fan-out (a scatter-gather's parts, a
        subscription's upstreams): each partition's replica to ask, within ``max_lag``,
        grouped by replica. Peers that lost a race lately, and those in ``last`` (a
        subscription's failed upstreams), are asked last; a global view is read here
        when this node is a replica; ``excluded[p]``'s are never chosen. A partition
        with no replica left is in no group."""
        plan: dict[str, list[int]] = {}
        partitions = list(partitions)
        if not partitions:
            return plan
        me = self.node.endpoint
        here_first = view in self.node.router.global_views  # held whole here: no hop
        suspect = self.hedging.suspect
        for p in partitions:
            eps = self.node.router.replicas(view, p, max_lag)
            eps.sort(key=lambda e: suspect(e.address) or e.address in last)  # stable
            if here_first:
                eps.sort(key=lambda e: e.address != me)
            skip = excluded.get(p, ()) if excluded is not None else ()
            choice = next((e for e in eps if e.address not in skip), None)
            if choice is not None:
                plan.setdefault(choice.address, []).append(p)
        return plan

    def for_peer(self, view: str, p: int) -> Here | Refuse:
        """Where a peer's request for partition ``p`` of ``view`` is answered: here, if
        this node holds it (the peer chose this replica, fresh enough, from its view of
        the cluster), else refused with a 421 so that the peer asks another; never
        forwarded again."""
        node = self.node
        if not node.holds(view, p):
            return Refuse(not_held(node.endpoint, view, p))
        self.traffic.for_peers += 1
        return Here(self.role(view, p), node.lag(view, p))

    def place(self, view: str, p: int, max_lag: int, tried: list[str]) -> Decision:
        """Where a client's request for partition ``p`` of ``view`` is answered, given
        the replicas already ``tried`` for it (each one chosen is appended; a 503 names
        them): here, when this node is the active owner within ``max_lag``; at a first
        ask, the preferred replica (cached: what a lookup's lean path and full route
        both ask first); after that, the next replica of a walk over them."""
        node = self.node
        role = self.role(view, p)
        lag = node.lag(view, p)
        if role == "active" and 0 <= lag <= max_lag and node.holds(view, p) and (
                node.endpoint not in tried):  # restoring: never answers
            self.traffic.local += 1
            return Here(role, lag)
        if not tried:
            owner = self.preferred(view, p, max_lag)
            if owner is not None:
                tried.append(owner)
                return Redirect(owner) if self.redirect else Forward(owner)
        return self._walk(view, p, max_lag, tried, role, lag)

    def _walk(self, view: str, p: int, max_lag: int, tried: list[str], role: str,
              lag: int) -> Decision:
        node = self.node
        replicas = node.router.replicas(view, p, max_lag)
        replicas.sort(key=lambda e: self.hedging.suspect(e.address))  # slow ones last
        for ep in replicas:
            if ep.address in tried:
                continue
            tried.append(ep.address)
            if ep.address != node.endpoint:
                return Redirect(ep.address) if self.redirect else Forward(ep.address)
            if node.holds(view, p):
                self.traffic.local += 1
                return Here(role, lag)
        return Refuse(Unavailable(f"no replica of {view} partition {p} can answer within "
                                  f"max_lag={max_lag}", view=view, partition=p,
                                  tried=list(tried)))

    def active_here(self, view: str, partition: int, max_lag: int) -> bool:
        """This node is assigned active for the partition, holds it, and is fresh enough."""
        return (self.role(view, partition) == "active"
                and 0 <= self.node.lag(view, partition) <= max_lag)

    def forget_roles(self) -> None:
        """Derive this node's roles again at the next question (membership moved)."""
        self._roles_at = -1e9

    def role(self, view: str, partition: int) -> str:
        """This node's role for a partition: "active", "standby" or "previous" (held, or
        asked about, without being assigned); re-derived at most every ``_ROLE_TTL``
        seconds (deriving it per lookup rebuilt the live-member set every time)."""
        now = time.monotonic()
        if now - self._roles_at > _ROLE_TTL:
            me, router = self.node.endpoint, self.node.router
            roles = {}
            for v, n in self.node.partitions.items():
                for p in range(n):
                    assigned = router.assigned(v, p)
                    if me in assigned:  # every holder of a global view answers as active
                        first = assigned[0] == me or v in router.global_views
                        roles[(v, p)] = "active" if first else "standby"
            self._roles, self._roles_at = roles, now
        return self._roles.get((view, partition), "previous")

    def preferred(self, view: str, p: int, max_lag: int) -> str | None:
        """The peer a key lookup is forwarded to first (None: no other replica),
        re-derived at most every ``_ROUTE_TTL`` seconds."""
        now = time.monotonic()
        hit = self._preferred.get((view, p, max_lag))
        if hit is not None and now - hit[0] < _ROUTE_TTL and not (
                hit[1] is not None and self.hedging.suspect(hit[1])):
            return hit[1]
        ep = self.node.router.owner(view, p, max_lag)
        if ep is not None and self.hedging.suspect(ep.address):  # it lost a race: another
            eps = self.node.router.replicas(view, p, max_lag)
            ep = min(eps, key=lambda e: self.hedging.suspect(e.address)) if eps else None
        owner = None if ep is None or ep.address == self.node.endpoint else ep.address
        self._preferred[(view, p, max_lag)] = (now, owner)
        return owner

    def forget(self, view: str, p: int, max_lag: int) -> None:
        """The preferred peer failed: choose again on the next lookup."""
        self._preferred.pop((view, p, max_lag), None)
