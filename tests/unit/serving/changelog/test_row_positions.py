"""Rows that carry their input positions and time (headers streamiq-pos, streamiq-ts):
a lookup of the written key is answered as soon as its row is stored, never earlier,
and never for another key; markers still bound everything else; freshness is measured
once a partition follows. The materializer's ``apply`` over in-memory stores."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from fakes import Message, offline_parts

from streamiq.config import Settings
from streamiq.kafka.partitioner import partition_for
from streamiq.serving.changelog.consistency import row_covered, row_reflects
from streamiq.serving.changelog.materializer import MAX_ROW_POSITIONS, Materializer, PartitionState
from streamiq.serving.node import Node
from streamiq.state import open_store
from streamiq.supervise import Supervisor
from streamiq.views.bank import BALANCES
from streamiq.views.base import MARKER_HEADER, MARKER_KEY, POSITION_HEADER, TIME_HEADER, load_app
from streamiq.views.orders import ORDER_COUNTS_1M

TOPIC = {"balances": "cl-b", "order_counts_1m": "cl-w"}



def _key(p: int, n: int = 1) -> str:
    """An account whose key is in changelog partition ``p`` of 3."""
    found = (f"a{i}" for i in range(10_000) if partition_for(f"a{i}".encode(), 3) == p)
    for _ in range(n - 1):
        next(found)
    return next(found)


def _row(account: str, balance: int, pos: str | None, ts: int | None = None,
         offset: int = 0, appended: tuple[int, int] = (0, -1)) -> Message:
    value = json.dumps({"account": account, "balance": balance, "count": 1,
                        "last_update": 0}).encode()
    headers = ([(POSITION_HEADER, pos.encode())] if pos is not None else []) + (
        [(TIME_HEADER, str(ts).encode())] if ts is not None else [])
    return Message(TOPIC["balances"], 0, offset, account.encode(), value, headers or None,
                   appended)


def _marker(offsets: dict[str, dict[str, int]], offset: int) -> Message:
    return Message(TOPIC["balances"], 0, offset, MARKER_KEY,
               json.dumps({"batch_id": 1, "offsets": offsets}).encode(),
               [(MARKER_HEADER, b"1")])


def _materializer(tmp_path: Path, restored: bool = True) -> Materializer:
    views = {"balances": BALANCES, "order_counts_1m": ORDER_COUNTS_1M}
    stores = {name: open_store("memory", tmp_path / name) for name in views}
    m = Materializer({}, views, stores, TOPIC, partitions={"balances": 3,
                                                           "order_counts_1m": 3},
                     input_ends=lambda tps: dict.fromkeys(tps, 1000))
    m.states[("balances", 0)] = PartitionState(restored=restored)
    m.states[("order_counts_1m", 0)] = PartitionState(restored=restored)
    return m


def test_a_rows_positions_answer_for_its_own_key_only(tmp_path: Path) -> None:
    mine, other = _key(0), _key(0, 2)
    m = _materializer(tmp_path)
    m.apply([_row(mine, 5, "in:1:41,in:2:7")])
    st = m.states[("balances", 0)]
    # the write at in:1:41 was folded into this key's row; markers say nothing yet
    assert row_reflects(st.rows.get(mine.encode()), st.position, [("in", 1, 41)])
    assert row_reflects(st.rows.get(mine.encode()), st.position, [("in", 1, 40), ("in", 2, 7)])
    assert not row_reflects(st.rows.get(mine.encode()), st.position, [("in", 1, 42)])
    assert not row_reflects(st.rows.get(mine.encode()), st.position, [("in", 0, 0)])
    # another key's row says nothing of this write
    assert not row_reflects(st.rows.get(other.encode()), st.position, [("in", 1, 41)])


def test_a_marker_covers_the_rest_and_drops_the_rows_it_covers(tmp_path: Path) -> None:
    a, b = _key(0), _key(0, 2)
    m = _materializer(tmp_path)
    m.apply([_row(a, 1, "in:1:3", offset=0), _row(b, 1, "in:1:9", offset=1),
             _marker({"in": {"1": 5}}, offset=2)])
    st = m.states[("balances", 0)]
    assert list(st.rows) == [b.encode()]  # a's row is covered by the marker (3 < 5)
    assert row_reflects(None, st.position, [("in", 1, 4)])  # any key: the marker
    assert not row_reflects(None, st.position, [("in", 1, 5)])
    assert row_reflects(st.rows[b.encode()], st.position, [("in", 1, 9)])


def test_a_replayed_older_row_takes_its_keys_position_back(tmp_path: Path) -> None:
    """After a pipeline restart the sink may write a key's older row again: the node
    then holds that row, and a read must wait again for the write it does not reflect."""
    a = _key(0)
    m = _materializer(tmp_path)
    m.apply([_row(a, 7, "in:1:20", offset=0)])
    m.apply([_row(a, 3, "in:1:12", offset=1)])
    st = m.states[("balances", 0)]
    assert not row_reflects(st.rows[a.encode()], st.position, [("in", 1, 20)])


def test_windowed_rows_and_rows_without_positions_are_not_remembered(tmp_path: Path) -> None:
    m = _materializer(tmp_path)
    m.apply([_row(_key(0), 1, None)])
    store = next(f"s{i}" for i in range(100) if partition_for(f"s{i}|GENERAL".encode(), 3) == 0)
    window = {"store": store, "type": "GENERAL", "window_start": 0, "window_end": 60_000,
              "count": 1, "revenue": 1.0}
    key = f"{store}|GENERAL".encode()
    m.apply([Message(TOPIC["order_counts_1m"], 0, 0, key, json.dumps(window).encode(),
                 [(POSITION_HEADER, b"in:0:1")])])
    assert m.states[("balances", 0)].rows == {}
    assert m.states[("order_counts_1m", 0)].offset == 1  # applied, and
    assert m.states[("order_counts_1m", 0)].rows == {}  # not remembered (windows: per task)


def test_remembered_rows_are_bounded_oldest_first(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streamiq.serving.changelog.materializer.MAX_ROW_POSITIONS", 2)
    m = _materializer(tmp_path)
    keys = [_key(0, i) for i in (1, 2, 3)]
    m.apply([_row(k, 1, f"in:0:{i}", offset=i) for i, k in enumerate(keys)])
    assert list(m.states[("balances", 0)].rows) == [k.encode() for k in keys[1:]]
    assert MAX_ROW_POSITIONS >= 10_000


def test_a_rewritten_key_is_kept_longest_and_the_bound_holds_after_a_marker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("streamiq.serving.changelog.materializer.MAX_ROW_POSITIONS", 2)
    m = _materializer(tmp_path)
    a, b, c, d = (_key(0, i).encode() for i in (1, 2, 3, 4))
    m.apply([_row(a.decode(), 1, "in:0:1", offset=0), _row(b.decode(), 1, "in:0:2", offset=1)])
    m.apply([_row(a.decode(), 2, "in:0:3", offset=2)])  # a written again: now the newest
    m.apply([_row(c.decode(), 1, "in:0:4", offset=3)])
    st = m.states[("balances", 0)]
    assert list(st.rows) == [a, c]  # b, the oldest written, left first
    st.position = {"in": {0: 3}}  # as if a marker had covered a
    Materializer._remember(st, {d: b"in:0:5"}, True)
    assert list(st.rows) == [c, d]
    Materializer._remember(st, {a: b"in:0:6", b: b"in:0:7"}, False)
    assert list(st.rows) == [a, b]  # the filtered rows still leave oldest first


def test_a_partition_restoring_keeps_no_row_positions(tmp_path: Path) -> None:
    # it answers no read until restored; a read after waits for a marker covering the
    # row (never wrong), and a restore of millions of rows does no bookkeeping per row
    m = _materializer(tmp_path, restored=False)
    m.apply([_row(_key(0, i), 1, f"in:0:{i}", offset=i) for i in (1, 2, 3)])
    st = m.states[("balances", 0)]
    assert st.offset == 4 and len(st.rows) == 0
    assert not row_reflects(st.rows.get(_key(0, 1).encode()), st.position, [("in", 0, 1)])
    st.restored = True
    m.apply([_row(_key(0, 4), 1, "in:0:4", offset=4)])
    assert list(st.rows) == [_key(0, 4).encode()]


def test_a_restore_reports_its_progress_until_restored(tmp_path: Path) -> None:
    m = _materializer(tmp_path, restored=False)
    st = m.states[("balances", 0)]
    st.started -= 2.0  # began two seconds ago
    before = st.restore_progress()
    assert before is not None and before["remaining"] == -1  # the end not yet known
    rows = [_row(_key(0, i + 1), 1, None, offset=i) for i in range(4)]
    m.apply(rows)
    st.target = 10
    progress = st.restore_progress(st.started + 2.0)
    assert progress is not None
    assert (progress["records"], progress["remaining"], progress["rate"]) == (4, 6, 2.0)
    assert progress["eta_s"] == 3.0
    assert progress["bytes"] == sum(len(r.key() or b"") + len(r.value() or b"") for r in rows)
    st.restored = True
    assert st.restore_progress() is None


def test_freshness_is_measured_once_the_partition_follows(tmp_path: Path) -> None:
    now_ms = int(time.time() * 1000)
    restoring = _materializer(tmp_path / "a", restored=False)
    restoring.apply([_row(_key(0), 1, "in:0:1", ts=now_ms - 3_600_000)])
    assert restoring.freshness.count(("balances",)) == 0  # an old row restored: not news
    following = _materializer(tmp_path / "b")
    following.apply([_row(_key(0), 1, "in:0:1", ts=now_ms - 20),
                     _row(_key(0, 2), 1, "in:0:2", offset=1)])  # no time: not measured
    assert following.freshness.count(("balances",)) == 1
    q = following.freshness.quantile(0.5)
    assert q is not None and q < 5.0
    assert following.stages.count(("balances", "pipeline")) == 0  # no record time: no stages


def test_a_rows_time_is_split_at_its_changelog_records_timestamp(tmp_path: Path) -> None:
    """Input time -> changelog record's time (pipeline) -> stored (node): the stages of
    the freshness, each observed once per row that carries both times."""
    now_ms = int(time.time() * 1000)
    m = _materializer(tmp_path)
    m.apply([_row(_key(0), 1, "in:0:1", ts=now_ms - 60_000, appended=(1, now_ms - 20_000))])
    pipeline = m.stages.quantile(0.5, [("balances", "pipeline")])
    node = m.stages.quantile(0.5, [("balances", "node")])
    assert pipeline is not None and 30.0 <= pipeline <= 60.0  # the 30-60 s bucket: 40 s
    assert node is not None and 10.0 <= node <= 30.0  # the 10-30 s bucket: 20 s
    assert m.stages.sums[("balances", "pipeline")] == pytest.approx(40.0, abs=0.01)
    assert m.stages.sums[("balances", "node")] == pytest.approx(20.0, abs=1.0)


def test_malformed_row_positions_answer_nothing() -> None:
    assert not row_reflects(b"in:x:1", {}, [("in", 0, 0)])
    assert not row_reflects(b"\xff", {}, [("in", 0, 0)])
    assert row_covered(b"not a position", {})  # nothing to remember


async def test_a_lookups_wait_ends_when_its_keys_row_is_stored() -> None:
    class FakeMaterializer:
        def __init__(self) -> None:
            self.states = {("balances", 0): PartitionState(position={"in": {1: 10}})}

    node = Node(Settings(app="bank"), load_app("bank"),
                offline_parts({"balances": 1}, FakeMaterializer()), Supervisor())
    token = [("in", 1, 41)]
    mine = asyncio.create_task(node.wait_position("balances", 0, token, 30.0, b"k1"))
    other = asyncio.create_task(node.wait_position("balances", 0, token, 0.3, b"k2"))
    scan = asyncio.create_task(node.wait_position("balances", 0, token, 0.3))
    await asyncio.sleep(0.05)
    node.materializer.states[("balances", 0)].rows[b"k1"] = b"in:1:41"
    node.applied()
    assert await mine
    assert not await other and not await scan  # the marker (10) is all they may use


def test_a_node_shows_each_partitions_position_as_a_token() -> None:
    """/health's ``positions``: what each partition held is known to reflect (markers and
    ticks), as the token of the newest write it reflects; nothing for a partition at 0."""
    class FakeMaterializer:
        def __init__(self) -> None:
            self.states = {("balances", 0): PartitionState(position={"in": {1: 10, 0: 3}}),
                           ("balances", 1): PartitionState(position={"in": {0: 0}})}

        def holding(self) -> dict[tuple[str, int], PartitionState]:
            return self.states

    node = Node(Settings(app="bank"), load_app("bank"),
                offline_parts({"balances": 2}, FakeMaterializer()), Supervisor())
    assert node.positions() == {"balances": {0: "in:0:2,in:1:9", 1: ""}}
