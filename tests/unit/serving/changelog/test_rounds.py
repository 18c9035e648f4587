"""How a consistent read moves its cut (``serving/changelog/rounds.py``)."""

from __future__ import annotations

import asyncio

import pytest

from streamiq.errors import CutMoved, NotUpToBound
from streamiq.serving.changelog.cuts import Cut, cut_token
from streamiq.serving.changelog.rounds import MAX_NEW, MAX_ROUNDS, at_one_cut

A, B = ("in", 0), ("in", 1)


class Cascade:
    """Two nodes lowering in turn: node 0 lowers partition 0 by one, node 1 partition 1,
    until both are at or below ``settles``."""

    def __init__(self, settles: int) -> None:
        self.settles = settles
        self.tried: list[Cut] = []
        self.new = 0

    async def attempt(self, cut: Cut) -> str:
        self.tried.append(dict(cut))
        p = len(self.tried) % 2
        tp = (A, B)[p]
        if cut[tp] > self.settles:
            raise CutMoved("a record within the cut was folded after one past it",
                           lower=cut_token({tp: cut[tp] - 1}))
        if max(cut.values()) > self.settles:
            raise CutMoved("the other node's turn", lower=cut_token(cut))
        return f"answer at {cut_token(cut)}"

    async def anew(self) -> Cut:
        self.new += 1
        return {A: 100, B: 100}


def test_a_cascade_across_nodes_longer_than_six_lower_cuts_is_followed_to_its_end() -> None:
    c = Cascade(settles=95)
    answer, cut = asyncio.run(at_one_cut({A: 100, B: 100}, c.attempt, c.anew, "bank"))
    assert cut == {A: 95, B: 95}
    assert answer == "answer at in:0:95,in:1:95"
    assert len(c.tried) > 6  # more than the old cap of six tries
    assert c.new == 0  # lowering never takes a new cut


def test_lowering_stops_after_the_most_tries() -> None:
    c = Cascade(settles=-1_000)
    with pytest.raises(NotUpToBound, match=f"held in {MAX_ROUNDS} tries .*folded after"):
        asyncio.run(at_one_cut({A: 100, B: 100}, c.attempt, c.anew, "bank's input"))
    assert len(c.tried) == MAX_ROUNDS
    assert all(later[A] <= earlier[A] and later[B] <= earlier[B]
               for earlier, later in zip(c.tried, c.tried[1:], strict=False))


def test_new_cuts_are_capped_and_the_refusal_says_why_and_who() -> None:
    new = 0

    async def gone(cut: Cut) -> str:
        raise CutMoved("the cut is older than the versions kept")

    async def anew() -> Cut:
        nonlocal new
        new += 1
        return {A: 10 + new}

    with pytest.raises(NotUpToBound) as got:
        asyncio.run(at_one_cut({A: 10}, gone, anew, "bank's input", served_by="n1:9001"))
    assert new == MAX_NEW - 1  # the first cut counts as one of them
    assert "older than the versions kept" in got.value.message
    assert got.value.extra == {"served_by": "n1:9001"}


def test_no_lower_cut_is_tried_past_the_deadline() -> None:
    c = Cascade(settles=95)

    async def run() -> None:
        await at_one_cut({A: 100, B: 100}, c.attempt, c.anew, "bank",
                         deadline=asyncio.get_running_loop().time() - 1)

    with pytest.raises(NotUpToBound, match="held in 1 try"):
        asyncio.run(run())
    assert len(c.tried) == 1


def test_a_counter_sees_every_move() -> None:
    c, moves = Cascade(settles=98), []
    asyncio.run(at_one_cut({A: 100, B: 100}, c.attempt, c.anew, "bank",
                           moved=lambda: moves.append(1)))
    assert len(moves) == len(c.tried) - 1
