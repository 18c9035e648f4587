from __future__ import annotations

from collections import Counter

from streamiq.routing.assignment import assign

THREE = ["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"]


def test_same_members_same_map_regardless_of_order() -> None:
    assert assign(THREE, 12, 2) == assign(list(reversed(THREE)), 12, 2)


def test_each_partition_has_distinct_replicas() -> None:
    for p, reps in assign(THREE, 12, 2).items():
        assert len(reps) == 2 and len(set(reps)) == 2, p


def test_actives_and_replicas_are_balanced() -> None:
    a = assign(THREE, 3, 2)
    assert sorted(r[0] for r in a.values()) == sorted(THREE)  # one active each (seed 000)
    assert set(Counter(x for r in a.values() for x in r).values()) == {2}


def test_standbys_capped_by_member_count() -> None:
    assert all(len(r) == 1 for r in assign(THREE[:1], 3, 3).values())
    assert assign([], 2, 1) == {0: [], 1: []}


def test_losing_a_member_keeps_surviving_actives_where_possible() -> None:
    before = assign(THREE, 12, 1)
    after = assign(THREE[:2], 12, 1)
    kept = sum(before[p][0] == after[p][0] for p in before if before[p][0] in THREE[:2])
    survivors = sum(1 for p in before if before[p][0] in THREE[:2])
    assert kept >= survivors - 2  # rendezvous hashing: few surviving actives move
