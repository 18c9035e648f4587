"""A subscription over the materializer's feed (issue 40): the real ``Materializer.apply``
over in-memory stores, a ``Subscription`` read as the HTTP route reads it. What a slow
reader costs (a bounded inbox, coalescing, a reset), windows, a handed-over partition."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fakes import Message
from feeders import TOPIC, Feeder

from streamiq.serving.changes.stream import Event, Scope, Subscription
from streamiq.views.bank import BALANCES
from streamiq.views.orders import ORDER_COUNTS_1M


async def _until_ready(events: AsyncIterator[Event]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async for e in events:
        if e.kind == "ready":
            return out
        assert e.data is not None
        out.append(orjson.loads(e.data))
    raise AssertionError("no ready event")


async def test_a_slow_reader_gets_the_newest_value_per_key_coalesced(tmp_path: Path) -> None:
    f = Feeder(tmp_path, buffer=2)
    f.put(("a", 1))
    sub = await Subscription.open(f.node, Scope(BALANCES, (0,)), None)
    events = sub.events(60)
    assert [d["value"] for d in await _until_ready(events)] == [
        {"account": "a", "balance": 1, "count": 1, "last_update": 0}]
    # the reader reads nothing while 9 changes come: its inbox keeps 2, then keys only
    f.put(("a", 2), ("b", 3), ("c", 4), ("a", 5), ("b", 6), ("a", 7), ("c", 8), ("b", 9),
          ("a", 10))
    assert len(sub.inbox._buffer) == 2 and set(sub.inbox._dirty) == {b"a", b"b", b"c"}
    got = [await anext(events) for _ in range(5)]
    docs = [orjson.loads(e.data or b"") for e in got]
    assert [(d["key"], d["value"]["balance"], d.get("coalesced")) for d in docs] == [
        ("a", 2, None), ("b", 3, None), ("c", 8, True), ("a", 10, True), ("b", 9, True)]
    assert [e.id for e in got[:2]] == ["0-2", "0-3"]
    assert [e.id for e in got[2:4]] == [None, None] and got[4].id == "0-10"  # past it all
    # back to every change once the reader keeps up
    f.put(("b", 11))
    e = await anext(events)
    assert orjson.loads(e.data or b"")["value"]["balance"] == 11 and e.id == "0-11"
    sub.close()
    assert f.m.feed.open == 0


async def test_too_many_coalesced_keys_reset_the_stream(tmp_path: Path) -> None:
    f = Feeder(tmp_path, buffer=1)
    sub = await Subscription.open(f.node, Scope(BALANCES, (0,)), None)
    events = sub.events(60)
    assert await _until_ready(events) == []
    f.put(*((f"k{i}", i) for i in range(20)))  # 1 kept, then more than 8 keys: a reset
    assert len(sub.inbox._buffer) == 1 and not sub.inbox._dirty and sub.inbox._reset
    first = await anext(events)
    assert orjson.loads(first.data or b"")["key"] == "k0"
    assert (await anext(events)).kind == "reset"
    rows = await _until_ready(events)
    assert {d["key"]: d["value"]["balance"] for d in rows} == {f"k{i}": i for i in range(20)}
    assert all(d["coalesced"] is True for d in rows)
    sub.close()


async def test_windowed_changes_carry_their_window(tmp_path: Path) -> None:
    f = Feeder(tmp_path, buffer=10)
    sub = await Subscription.open(f.node, Scope(ORDER_COUNTS_1M, (0,), keys=("s1|GENERAL",)),
                                  None)
    events = sub.events(60)
    assert await _until_ready(events) == []
    row = {"store": "s1", "type": "GENERAL", "window_start": 60_000, "window_end": 120_000,
           "count": 2, "revenue": 3.5}
    f.m.apply([Message(TOPIC["order_counts_1m"], 0, 0, b"s1|GENERAL",
                       json.dumps(row).encode())])
    doc = orjson.loads((await anext(events)).data or b"")
    assert (doc["key"], doc["window_start"], doc["window_end"], doc["value"]["count"]) == (
        "s1|GENERAL", 60_000, 120_000, 2)
    sub.close()


async def test_a_partition_handed_over_ends_its_streams(tmp_path: Path) -> None:
    f = Feeder(tmp_path, buffer=10)
    sub = await Subscription.open(f.node, Scope(BALANCES, (0,), keys=("a",)), None)
    events = sub.events(60)
    await _until_ready(events)
    with f.m.feed.lock:
        f.m.feed.end("balances", 0, "the partition was handed over")
    end = await anext(events)
    assert end.kind == "end" and end.id == "0-0"
    assert orjson.loads(end.data or b"") == {"reason": "the partition was handed over"}
    with pytest.raises(StopAsyncIteration):  # nothing after it
        await anext(events)
    assert f.m.feed.open == 0  # the stream closed its inbox
