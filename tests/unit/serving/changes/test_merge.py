"""The merged stream every ``/changes`` client reads (``merge.py``): its keepalives are
the client's own, not its upstreams' (which come every 1-3 s and are dropped)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from feeders import Feeder

from streamiq.errors import Unavailable
from streamiq.serving.changes import merge
from streamiq.serving.changes.merge import Merge
from streamiq.serving.changes.stream import Scope
from streamiq.serving.cluster.placement import Placement
from streamiq.serving.cluster.traffic import Traffic
from streamiq.views.bank import BALANCES


async def test_an_idle_merged_stream_sends_the_client_keepalives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the local upstream's keepalive every 0.05 s, the client's every 0.3 s: before, each
    # upstream keepalive restarted the client's wait and none ever reached the client
    monkeypatch.setattr(merge, "HANG_S", 0.05)
    f = Feeder(tmp_path, buffer=10)
    f.put(("a", 1))
    placement = Placement(f.node, Traffic())
    events = Merge(f.node, placement, "mark", Scope(BALANCES, (0,)), None, None).events(0.3)
    try:
        async with asyncio.timeout(30):  # a bound on a hang, not a timing
            kinds = [(await anext(events)).kind for _ in range(2)]
            assert kinds == [None, "ready"]
            assert (await anext(events)).kind == "keepalive"
            f.put(("a", 2))
            assert (await anext(events)).kind is None  # the change, then idle again
            assert (await anext(events)).kind == "keepalive"
    finally:
        await events.aclose()


async def test_a_stream_that_finds_no_replica_ends_with_a_503_saying_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No member holds the partition restored: the stream's first step raises
    ``Unavailable`` (a 503 before any byte, ``asgi.py``) naming what each member reports,
    not an internal error."""
    monkeypatch.setattr(merge, "_FIND_S", 0.3)
    f = Feeder(tmp_path, buffer=10)
    f.m.states[("balances", 0)].restored = False  # restoring here, and held nowhere else
    placement = Placement(f.node, Traffic())
    events = Merge(f.node, placement, "mark", Scope(BALANCES, (0,)), None, None).events(0.3)
    try:
        with pytest.raises(Unavailable) as caught:
            async with asyncio.timeout(30):  # a bound on a hang, not a timing
                await anext(events)
    finally:
        await events.aclose()
    assert caught.value.http_status == 503
    assert "no replica of 'balances' partitions [0] within 0s (partition 0: " in \
        caught.value.message, caught.value.message
