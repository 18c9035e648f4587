"""Hedge delays from measured latency (serving/cluster/hedge.py)."""

from __future__ import annotations

from streamiq.serving.cluster.hedge import FLOOR_S, ONE_CAP_S, WINDOW, Hedging


def test_answers_under_the_clocks_tick_leave_the_floor_and_raise_nothing() -> None:
    """uvloop's clock moves in 1 ms ticks: fast answers measure 0.0. When every kept
    answer of a kind measured 0, the best percentile is 0 and the delay the floor (it
    raised ValueError from min() of nothing, in the forwarded lookup's reply callback,
    before the answer was written: that client waited for ever)."""
    h = Hedging()
    for _ in range(8):
        h.observe("a:1", "lookup", 0.001)
    for _ in range(2 * WINDOW):
        h.observe("a:1", "lookup", 0.0)
    assert h.delay("a:1", "lookup") == FLOOR_S


def test_the_delay_is_the_best_peers_95th_percentile_within_floor_and_cap() -> None:
    h = Hedging()
    for _ in range(WINDOW):
        h.observe("fast:1", "lookup", 0.05)
        h.observe("slow:1", "lookup", 5.0)
    assert h.delay("slow:1", "lookup") == 0.05  # what a healthy replica takes
    for _ in range(WINDOW):
        h.observe("fast:1", "lookup", 0.5)
    assert h.delay("fast:1", "lookup") == ONE_CAP_S
