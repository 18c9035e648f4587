"""Partition assignment: a pure function of the live member set.

Every node computes the same map from the same members, so agreement needs no
coordinator: membership converges through the heartbeat topic, and so does the map.
Actives by balanced rendezvous hashing: each partition ranks members by a hash of
(member, partition) and takes the best-ranked member still under its fair share, so
adding or removing a member moves few actives. Standbys are the active's successors
on the sorted ring of members.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

__all__ = ["assign"]


def _score(member: str, partition: int) -> int:
    digest = hashlib.blake2b(f"{member}#{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign(members: Sequence[str], partitions: int, replicas: int = 1
           ) -> dict[int, list[str]]:
    """partition -> [active, standby, ...] (at most ``len(members)`` entries each)."""
    live = sorted(set(members))
    if not live:
        return {p: [] for p in range(partitions)}
    copies = min(replicas, len(live))
    cap = -(-partitions // len(live))  # ceil: each member's fair share of actives
    load = dict.fromkeys(live, 0)
    out: dict[int, list[str]] = {}
    for p in range(partitions):
        ranked = sorted(live, key=lambda m: (-_score(m, p), m))
        active = next((m for m in ranked if load[m] < cap), ranked[0])
        load[active] += 1
        # Standbys follow the active around the ring of members: balanced whenever the
        # actives are, and deterministic for every node.
        i = live.index(active)
        out[p] = [live[(i + k) % len(live)] for k in range(copies)]
    return out
