"""Routing: which replica answers for a view partition.

``owner(view, key)`` names the endpoint a key lookup goes to; ``replicas`` lists every
acceptable replica in order of preference (the assigned active, then the freshest
standby within ``max_lag``, then a previous owner still holding the partition);
``metadata()`` is the cluster map used for scatter-gather. Everything is derived
from the live members' heartbeats, so every node reaches the same answers.

A global view (Kafka Streams' GlobalKTable) is assigned to every live member: its
partitions keep their balanced active and standbys first, then every other member, so
each node materialises all of it and answers its lookups where they arrive.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from streamiq.routing.assignment import assign
from streamiq.routing.base import Member, Membership

__all__ = ["Endpoint", "Router"]

log = logging.getLogger("streamiq.routing")


@dataclass(frozen=True)
class Endpoint:
    address: str
    role: str  # "active" | "standby" | "previous"
    lag: int


class Router:
    def __init__(self, membership: Membership, partitions: Mapping[str, int],
                 standby_replicas: int, global_views: Iterable[str] = ()) -> None:
        self.membership = membership
        self.partitions = dict(partitions)  # view -> changelog partition count
        self.global_views = frozenset(global_views)  # held whole by every member
        self.copies = 1 + standby_replicas
        self._cache: tuple[frozenset[str], dict[int, dict[int, list[str]]]] | None = None
        self._members: frozenset[str] = frozenset()  # the live set last routed with
        self.changes = 0  # times the live set changed (joins and departures)

    @property
    def me(self) -> str:
        return self.membership.endpoint

    def assignment(self, members: Mapping[str, Member] | None = None
                   ) -> dict[int, dict[int, list[str]]]:
        """partition count -> partition -> [active, standbys...] for the live members."""
        live = frozenset(members if members is not None else self.membership.live())
        if self._cache is None or self._cache[0] != live:
            if live != self._members:
                self._changed(live)
            counts = set(self.partitions.values())
            self._cache = (live, {n: assign(sorted(live), n, self.copies) for n in counts})
        return self._cache[1]

    def _changed(self, live: frozenset[str]) -> None:
        """One line per membership change (the metric counts them)."""
        joined, left = sorted(live - self._members), sorted(self._members - live)
        if self._members or len(live) > 1:  # not this node alone on its first look
            self.changes += 1
            log.info("members: %s%s%s; %d live", "joined " + ", ".join(joined) if joined else "",
                     "; " if joined and left else "", "left " + ", ".join(left) if left else "",
                     len(live))
        self._members = live

    def add_view(self, view: str, partitions: int, is_global: bool = False) -> None:
        """Route a view found while running (the view catalog)."""
        self.partitions = {**self.partitions, view: partitions}
        if is_global:
            self.global_views = self.global_views | {view}
        self._cache = None

    def assigned(self, view: str, partition: int,
                 members: Mapping[str, Member] | None = None) -> list[str]:
        """[active, standbys...]; for a global view every live member follows them."""
        members = members if members is not None else self.membership.live()
        out = self.assignment(members)[self.partitions[view]][partition]
        if view in self.global_views:
            out = out + sorted(set(members) - set(out))
        return out

    def replicas(self, view: str, partition: int, max_lag: int) -> list[Endpoint]:
        """Acceptable replicas for a partition, most preferred first."""
        members = self.membership.live()
        assigned = self.assigned(view, partition, members)
        out: list[Endpoint] = []
        for address, m in members.items():
            state = m.partitions.get(view, {}).get(partition)
            if state is None:
                continue
            lag = int(state.get("lag", -1))
            if not state.get("restored") or lag < 0 or lag > max_lag:
                continue
            role = ("active" if assigned and assigned[0] == address
                    else "standby" if address in assigned else "previous")
            out.append(Endpoint(address, role, lag))
        rank = {"active": 0, "standby": 1, "previous": 2}
        out.sort(key=lambda e: (rank[e.role], e.lag, e.address))
        return out

    def states(self, view: str, partitions: Sequence[int], max_lag: int) -> str:
        """What each live member reports of each of ``partitions`` (the first 3), for an
        error's detail: not held, restoring, its changelog's end unknown, or its lag
        (records of the changelog not applied yet; ``> max_lag`` when past it). Lag 0
        everywhere under a read that did not reflect its position says the pipeline has
        not written rows that far yet: the replicas are not behind their changelog."""
        return "; ".join(self._state(view, p, max_lag) for p in partitions[:3])

    def _state(self, view: str, partition: int, max_lag: int) -> str:
        said = []
        for address, m in sorted(self.membership.live().items()):
            state = m.partitions.get(view, {}).get(partition)
            if state is None:
                said.append(f"{address} does not hold it")
            elif not state.get("restored"):
                said.append(f"{address} restoring")
            elif (lag := int(state.get("lag", -1))) < 0:
                said.append(f"{address} end unknown")
            else:
                said.append(f"{address} lag {lag}" + (f" > {max_lag}" if lag > max_lag else ""))
        return f"partition {partition}: " + (", ".join(said) or "no live member")

    def owner(self, view: str, partition: int, max_lag: int) -> Endpoint | None:
        found = self.replicas(view, partition, max_lag)
        return found[0] if found else None

    def wanted_local(self, held: set[tuple[str, int]]) -> set[tuple[str, int]]:
        """What this node should materialise: its assignment, plus partitions it still
        holds until their new replicas have restored (so queries never lose an answer)."""
        members = self.membership.live()
        wanted: set[tuple[str, int]] = set()
        for view, n in self.partitions.items():
            for p in range(n):
                assigned = self.assigned(view, p, members)
                keep = (view, p) in held and not self._restored(view, p, assigned, members)
                if self.me in assigned or keep:
                    wanted.add((view, p))
        return wanted

    @staticmethod
    def _restored(view: str, p: int, assigned: list[str], members: Mapping[str, Member]) -> bool:
        for address in assigned:
            m = members.get(address)
            state = m.partitions.get(view, {}).get(p) if m else None
            if state is None or not state.get("restored"):
                return False
        return bool(assigned)

    def metadata(self) -> dict[str, Any]:
        """The cluster map: members, their endpoints, what each holds and how far behind."""
        members = self.membership.live()
        views = {}
        for view, n in self.partitions.items():
            views[view] = {str(p): {"assigned": self.assigned(view, p, members),
                                    "replicas": [e.__dict__ for e in
                                                 self.replicas(view, p, 1 << 62)]}
                           for p in range(n)}
        nodes = [{"endpoint": a, "self": a == self.me, "started_at": m.started_at,
                  "partitions": {v: {str(p): s for p, s in ps.items()}
                                 for v, ps in m.partitions.items()}}
                 for a, m in sorted(members.items())]
        return {"nodes": nodes, "views": views}
