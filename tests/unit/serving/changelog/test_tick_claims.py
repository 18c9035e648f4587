"""Tick rows on the serving side (serving/changelog/ticks.py): a partition's position
moves only once *every* aggregation task's tick row names an offset, by the least of
them; rows crafted for another task or partition are refused; tick rows are never
stored; the Ticker writes at most one tick per input partition per gap, and a read
arriving after the newest one asks for the next."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fakes import Message, offline_parts

from streamiq.config import Settings
from streamiq.errors import BadRequest, NotUpToBound
from streamiq.kafka.partitioner import partition_for
from streamiq.kafka.skips import Skip
from streamiq.serving.changelog.materializer import Materializer, PartitionState
from streamiq.serving.changelog.ticks import MIN_GAP_S, TickClaims, Ticker, merge
from streamiq.serving.node import Node
from streamiq.state import open_store
from streamiq.supervise import Supervisor
from streamiq.views.bank import BALANCES
from streamiq.views.base import POSITION_HEADER, TICK_HEADER, TICK_KEY, load_app


def _key(task: int, part: int, n: int = 0) -> bytes:
    return f"~tick~{task}.{part}.{n}".encode()


def test_the_position_is_the_least_claim_once_every_task_has_one() -> None:
    claims = TickClaims(1)
    assert claims.add(_key(0, 1), b"0/3", b"in:2:40") == {}
    assert claims.add(_key(1, 1), b"1/3", b"in:2:50") == {}  # task 2 has said nothing
    # every record of in:2 before 30 (the least claim) has its rows here: next offset 31
    assert claims.add(_key(2, 1), b"2/3", b"in:2:30") == {("in", 2): 31}
    assert claims.add(_key(2, 1), b"2/3", b"in:2:45") == {("in", 2): 41}
    # another input partition counts only once every task names it
    assert claims.add(_key(0, 1), b"0/3", b"in:2:60,in:0:9") == {("in", 2): 46}
    assert claims.add(_key(1, 1, 7), b"1/3", b"in:0:12") == {}
    assert claims.add(_key(2, 1), b"2/3", b"in:0:11") == {("in", 0): 10}
    # an older claim (a replayed row) never moves it back
    assert claims.add(_key(2, 1), b"2/3", b"in:2:1") == {("in", 2): 46}


@pytest.mark.parametrize(("key", "header", "why"), [
    (_key(1, 1), b"0/3", "misrouted_tick"),  # crafted for task 1, written by task 0
    (_key(0, 2), b"0/3", "misrouted_tick"),  # crafted for partition 2, found in 1
    (_key(3, 1), b"3/3", "misrouted_tick"),  # no task 3 of 3
    (_key(0, 1), None, "bad_tick"),  # no header
    (_key(0, 1), b"zero", "bad_tick"),
    (b"~tick~nonsense", b"0/3", "bad_tick"),
])
def test_tick_rows_that_cannot_be_right_are_refused(key: bytes, header: bytes | None,
                                                     why: str) -> None:
    with pytest.raises(Skip) as err:
        TickClaims(1).add(key, header, b"in:0:5")
    assert err.value.reason == why


def test_merge_only_raises() -> None:
    pos = {"in": {0: 10}}
    assert merge(pos, {("in", 0): 5, ("in", 1): 3})
    assert pos == {"in": {0: 10, 1: 3}}
    assert not merge(pos, {("in", 0): 10})


def _tick_row(task: int, part: int, pos: str, offset: int) -> Message:
    value = json.dumps({"account": f"~tick~{task}.{part}.0", "balance": None, "count": 1,
                        "last_update": None}).encode()
    return Message("cl-b", part, offset, _key(task, part),
                   value, [(POSITION_HEADER, pos.encode()), (TICK_HEADER, f"{task}/2".encode())])


def test_the_materializer_moves_the_position_and_stores_no_tick_row(tmp_path: Path) -> None:
    store = open_store("memory", tmp_path / "b")
    m = Materializer({}, {"balances": BALANCES}, {"balances": store}, {"balances": "cl-b"},
                     partitions={"balances": 3}, input_ends=lambda tps: dict.fromkeys(tps, 99))
    part = 1
    m.states[("balances", part)] = st = PartitionState(restored=True)
    account = next(f"a{i}" for i in range(999) if partition_for(f"a{i}".encode(), 3) == part)
    row = Message("cl-b", part, 0, account.encode(), json.dumps(
        {"account": account, "balance": 5, "count": 1, "last_update": 0}).encode(),
        [(POSITION_HEADER, b"in:0:3")])
    m.apply([row, _tick_row(0, part, "in:0:7", 1)])
    assert st.position == {}  # task 1 has said nothing yet
    m.apply([_tick_row(1, part, "in:0:9", 2)])
    assert st.position == {"in": {0: 8}}
    assert st.offset == 3
    assert [k for k, _ in store.scan(part)] == [account.encode()]
    assert account.encode() not in st.rows  # the ticks cover its row: forgotten
    bad = Message("cl-b", part, 3, _key(0, part), b"{}", [(POSITION_HEADER, b"in:0:50")])
    m.apply([bad])  # a tick key without its header: skipped and counted, never trusted
    assert m.skipped == 1 and st.position == {"in": {0: 8}} and st.offset == 4


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, int, bytes]] = []

    def produce(self, topic: str, key: bytes, value: bytes, partition: int,
                on_delivery: Any) -> None:
        self.sent.append((topic, partition, key))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def test_the_ticker_writes_one_tick_per_gap_and_again_for_a_later_read() -> None:
    p = _Producer()
    ticker = Ticker(lambda: p)
    t0 = time.monotonic()
    ticker.ask("in", 1, t0)
    assert p.sent == [("in", 1, TICK_KEY)]
    ticker.ask("in", 1, t0)  # written after this read arrived: nothing more
    ticker.ask("in", 2, t0)  # another partition: its own
    assert len(p.sent) == 2
    later = time.monotonic()
    ticker.ask("in", 1, later + 1e-6)  # arrived after the newest: one more, after the gap
    ticker.ask("in", 1, later + 2e-6)  # already due: not twice
    deadline = time.monotonic() + 5
    while len(p.sent) < 3 and time.monotonic() < deadline:
        time.sleep(MIN_GAP_S)
    time.sleep(10 * MIN_GAP_S)
    ticker.close()
    assert p.sent == [("in", 1, TICK_KEY), ("in", 2, TICK_KEY), ("in", 1, TICK_KEY)]


class _Delivering(_Producer):
    """Delivers each tick at the next poll, at the next offset of its partition; knows
    topic ``in`` with 3 partitions."""

    def __init__(self) -> None:
        super().__init__()
        self.pending: list[tuple[str, int, Any]] = []
        self.ends: dict[tuple[str, int], int] = {}

    def produce(self, topic: str, key: bytes, value: bytes, partition: int,
                on_delivery: Any) -> None:
        super().produce(topic, key, value, partition, on_delivery)
        self.pending.append((topic, partition, on_delivery))

    def poll(self, timeout: float) -> int:
        done, self.pending = self.pending, []
        for topic, partition, callback in done:
            offset = self.ends.get((topic, partition), 100)
            self.ends[(topic, partition)] = offset + 1
            callback(None, SimpleNamespace(topic=lambda t=topic: t,
                                           partition=lambda p=partition: p,
                                           offset=lambda o=offset: o))
        return len(done)

    def list_topics(self, topic: str, timeout: float) -> Any:
        known = {"in": SimpleNamespace(error=None, partitions={0: 0, 1: 1, 2: 2})}
        return SimpleNamespace(topics={t: m for t, m in known.items() if t == topic})


def test_a_staleness_bound_is_the_offsets_of_ticks_written_since_then() -> None:
    """``Ticker.recent``: per partition, the newest delivered tick written at or after
    ``since``; a partition without one gets a tick, and its offset once delivered. A
    tick written before ``since`` is too old to bound the read."""
    p = _Delivering()
    ticker = Ticker(lambda: p)
    t0 = time.monotonic()
    found, missing = ticker.recent("in", t0)
    assert found == [] and missing == [0, 1, 2] and len(p.sent) == 3  # one tick each
    ticker.poll()  # delivered: offsets 100 of each partition
    found, missing = ticker.recent("in", t0)
    assert found == [("in", 0, 100), ("in", 1, 100), ("in", 2, 100)] and missing == []
    assert len(p.sent) == 3  # recent enough: no new tick
    time.sleep(3 * MIN_GAP_S)
    later = time.monotonic()
    found, missing = ticker.recent("in", later)  # those ticks are now too old
    assert found == [] and missing == [0, 1, 2]
    deadline = time.monotonic() + 5
    while len(p.sent) < 6 and time.monotonic() < deadline:
        time.sleep(MIN_GAP_S)
    ticker.poll()
    assert ticker.recent("in", later) == ([("in", 0, 101), ("in", 1, 101), ("in", 2, 101)],
                                          [])
    with pytest.raises(LookupError, match="'other' not found"):
        ticker.recent("other", later)
    ticker.close()


async def test_a_node_turns_a_staleness_bound_into_its_ticks_position() -> None:
    """``Node.recent_input``: the offsets of ticks it wrote since ``now - S`` (waiting
    for their delivery), for a view with ticks; a 400 naming ``max_staleness_ms`` for a
    view without; NOT_UP_TO_BOUND when no tick is delivered within the wait."""
    class NoMaterializer:
        states: dict[Any, Any] = {}

    node = Node(Settings(app="bank"), load_app("bank"),
                offline_parts({"balances": 1}, NoMaterializer()), Supervisor())
    p = _Delivering()
    node.ticker = Ticker(lambda: p)
    with pytest.raises(BadRequest, match="max_staleness_ms") as refused:
        await node.recent_input("balances", 1.0, 1.0)
    assert refused.value.extra.get("field") == "max_staleness_ms"
    node.tick_topics = {"balances": frozenset({"in"})}
    got = await node.recent_input("balances", 1.0, 10.0)
    assert got == [("in", 0, 100), ("in", 1, 100), ("in", 2, 100)]
    assert await node.recent_input("balances", 60.0, 10.0) == got  # still recent: reused
    silent = _Producer()
    silent.list_topics = p.list_topics  # type: ignore[attr-defined]  # never delivers
    node.ticker = Ticker(lambda: silent)
    with pytest.raises(NotUpToBound, match="no tick delivered"):
        await node.recent_input("balances", 1.0, 0.05)


async def test_a_settled_cut_is_what_every_held_partition_reflects_past_a_recent_tick(
        ) -> None:
    """``Node.settled_cut``: per input partition, the least position of the view's
    restored partitions here, once it covers a tick written within the bound; None
    (the caller ticks and waits) before any tick, while one is not reflected yet, when
    the ticks are too old, and for a view without ticks or partitions held."""
    held = {("balances", 0): SimpleNamespace(restored=True, position={}),
            ("balances", 1): SimpleNamespace(restored=True, position={}),
            ("balances", 2): SimpleNamespace(restored=False, position={})}  # not counted

    class Holding:
        states = held

    node = Node(Settings(app="bank"), load_app("bank"),
                offline_parts({"balances": 1}, Holding()), Supervisor())
    p = _Delivering()
    node.ticker = Ticker(lambda: p)
    assert node.settled_cut("balances") is None  # no ticks: none
    node.tick_topics = {"balances": frozenset({"in"})}
    assert node.settled_cut("balances") is None  # the partitions unknown yet
    await node.recent_input("balances", 0.0, 10.0)  # ticks at 100 delivered (and counted)
    assert node.settled_cut("balances") is None  # not reflected yet
    held[("balances", 0)].position = {"in": {0: 101, 1: 101, 2: 140}}
    held[("balances", 1)].position = {"in": {0: 120, 1: 100, 2: 105}}
    assert node.settled_cut("balances") is None  # partition 1 not past in:1's tick yet
    held[("balances", 1)].position["in"][1] = 101
    held[("balances", 0)].position["in"][2] = 103
    # the least position of each, offsets inclusive: partition 2 reaches 102
    assert node.settled_cut("balances") == [("in", 0, 100), ("in", 1, 100), ("in", 2, 102)]
    time.sleep(0.02)
    assert node.settled_cut("balances", fresh_s=0.01) is None  # the ticks are too old
    assert node.settled_cut("orders") is None  # no partition of it held
