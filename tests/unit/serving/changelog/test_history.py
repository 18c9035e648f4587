"""A partition's history of versions and a read at one cut (``cuts.py``, ``atcut.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import Message

from streamiq.errors import CutMoved
from streamiq.kafka.partitioner import partition_for
from streamiq.serving.changelog.consistency import parse_tokens
from streamiq.serving.changelog.cuts import KEEP_S, MAX_VERSIONS, History, cut_of, cut_token, lower
from streamiq.serving.changelog.materializer import Materializer, PartitionState
from streamiq.serving.query.atcut import AtCut
from streamiq.state import open_store
from streamiq.state.base import Checkpoint
from streamiq.state.memory import MemoryStore
from streamiq.views.bank import BALANCES
from streamiq.views.base import POSITION_HEADER

T = "in"
#: an account in changelog partition 0 of 3
KEY = next(f"a{i}" for i in range(1000) if partition_for(f"a{i}".encode(), 3) == 0)


def pos(**offsets: int) -> bytes:
    """``pos(p0=3, p1=7)``: a row's streamiq-pos header."""
    return ",".join(f"{T}:{k[1:]}:{o}" for k, o in offsets.items()).encode()


def cut(p0: int, p1: int) -> dict[tuple[str, int], int]:
    return {(T, 0): p0, (T, 1): p1}


def kept(keep_s: float = KEEP_S, max_versions: int = MAX_VERSIONS) -> History:
    """A history recording from the start of the input (its floor known, at 0)."""
    h = History(keep_s, max_versions)
    h.floor_at({})
    return h


def test_a_key_reads_the_newest_version_within_the_cut_and_its_value_before() -> None:
    h = kept()
    h.record([(b"a", pos(p0=1), b"v1"), (b"a", pos(p0=5), b"v5"), (b"a", pos(p0=9), b"v9")],
             {b"a": b"v0"})
    assert h.at(b"a", cut(5, 0)) == (True, b"v5")
    assert h.at(b"a", cut(8, 0)) == (True, b"v5")  # 9 is past the cut
    assert h.at(b"a", cut(100, 0)) == (True, b"v9")
    assert h.at(b"a", cut(0, 0)) == (True, b"v0")  # before the first kept version
    assert h.at(b"other", cut(0, 0)) == (False, None)  # unchanged lately: as stored


def test_a_key_new_since_the_cut_is_absent_at_it() -> None:
    h = kept()
    h.record([(b"n", pos(p1=4), b"x")], {b"n": None})
    assert h.at(b"n", cut(0, 3)) == (True, None)
    assert h.at(b"n", cut(0, 4)) == (True, b"x")


def test_a_record_within_the_cut_folded_after_one_past_it_names_a_lower_cut() -> None:
    h = kept()
    # p0:10 (past a cut at p0=5) was folded before p1:3 (within a cut at p1=6)
    h.record([(b"k", pos(p0=2), b"a"), (b"k", pos(p0=10), b"b"),
              (b"k", pos(p0=10, p1=3), b"c")], {b"k": None})
    with pytest.raises(CutMoved) as moved:
        h.at(b"k", cut(5, 6))
    lowered = cut_of(parse_tokens(moved.value.extra["lower"]))
    assert lowered == cut(5, 2)  # p1:3 excluded: then version "a" is exactly the cut
    assert h.at(b"k", lowered) == (True, b"a")
    assert h.at(b"k", cut(10, 6)) == (True, b"c")  # both in: the newest


def test_the_floor_refuses_a_cut_older_than_what_is_kept() -> None:
    h = History()
    with pytest.raises(CutMoved, match="no versions"):
        h.check(cut(100, 100))  # what stored rows folded is not known: nothing rebuilt
    h.floor_at({(T, 0): 8})  # the input's end then: rows outside the chains folded p0 < 8
    h.floor_at({(T, 0): 20})  # a floor once known only rises with what it drops
    h.check(cut(7, 0))
    with pytest.raises(CutMoved):
        h.check(cut(6, 0))


def test_chains_unchanged_for_keep_s_are_dropped_and_raise_the_floor() -> None:
    h = kept(keep_s=10)
    h.record([(b"a", pos(p0=3), b"1")], {b"a": None}, now=0.0)
    h.record([(b"b", pos(p1=9), b"2")], {b"b": None}, now=5.0)
    h.record([(b"a", pos(p0=4), b"3")], {}, now=8.0)  # a changed again: kept longer
    h.trim(now=16.0)  # b unchanged since 5: gone; a since 8: kept
    assert set(h.chains) == {b"a"}
    assert h.floor == {(T, 1): 10}
    assert h.size == 2
    # the bytes kept: key a, its value before (none), two versions' positions and values
    assert h.nbytes == 1 + 2 * len(pos(p0=3)) + 2
    h.trim(now=19.0)
    assert not h.chains and h.floor == {(T, 0): 5, (T, 1): 10} and h.size == 0
    assert h.nbytes == 0


def test_the_most_versions_kept_drops_the_oldest_chains_first() -> None:
    h = kept(max_versions=3)
    h.record([(b"a", pos(p0=1), b"1"), (b"b", pos(p0=2), b"2"), (b"c", pos(p0=3), b"3"),
              (b"d", pos(p0=4), b"4")], {}, now=0.0)
    assert list(h.chains) == [b"b", b"c", b"d"]
    assert h.floor == {(T, 0): 2}


def test_cut_helpers() -> None:
    c = cut_of([(T, 0, 5), (T, 0, 7), (T, 1, 2)])
    assert c == cut(7, 2)
    assert cut_token(c) == "in:0:7,in:1:2"
    assert lower(c, {(T, 0): 3, (T, 2): 1}) == cut(3, 2)


def _store(rows: dict[bytes, bytes]) -> MemoryStore:
    s = MemoryStore()
    s.apply(0, list(rows.items()), Checkpoint(offset=1))
    return s


def test_a_store_read_at_a_cut_gets_scans_and_multi_gets_each_key_as_of_the_cut() -> None:
    store = _store({b"a": b"a-now", b"b": b"b-old", b"n": b"n-new"})
    h = kept()
    h.record([(b"a", pos(p0=9), b"a-now")], {b"a": b"a-old"})  # past the cut
    h.record([(b"n", pos(p1=9), b"n-new")], {b"n": None})  # new past the cut
    h.record([(b"g", pos(p0=9), None)], {b"g": b"g-old"})  # deleted past the cut
    at = AtCut(store, {0: h}, cut(5, 5))
    assert list(at.scan(0)) == [(b"a", b"a-old"), (b"b", b"b-old"), (b"g", b"g-old")]
    assert list(at.scan(0, b"b", b"h")) == [(b"b", b"b-old"), (b"g", b"g-old")]
    assert at.multi_get(0, [b"n", b"a", b"b", b"g"]) == [None, b"a-old", b"b-old", b"g-old"]
    assert at.get(0, b"a") == b"a-old"
    at.finish()


def test_a_read_at_a_cut_whose_versions_were_dropped_meanwhile_is_refused() -> None:
    store = _store({b"a": b"1"})
    h = kept(keep_s=1)
    h.record([(b"a", pos(p0=3), b"1")], {b"a": None}, now=0.0)
    at = AtCut(store, {0: h}, cut(2, 0))
    assert at.get(0, b"a") is None
    h.trim(now=5.0)  # the chain went: p0 up to 3 is outside the chains now
    with pytest.raises(CutMoved):
        at.finish()


def test_versions_are_kept_only_while_consistent_reads_come() -> None:
    h = kept()
    assert not h.active(now=0.0)
    h.activate(now=0.0)
    assert h.active(now=59.0) and not h.active(now=61.0)
    h.record([(b"a", pos(p0=3), b"1")], {b"a": None}, now=1.0)
    h.skip()  # rows stored without versions: all chains go, the floor is not known
    assert not h.chains and h.size == 0 and h.nbytes == 0 and h.floor is None
    with pytest.raises(CutMoved):
        h.check(cut(6, 5))


def test_a_partition_settles_on_the_newest_cut_every_key_it_keeps_holds_exactly() -> None:
    h = kept()
    # k: p0:10 (past a cut at p0=5) folded before p1:3; j: p0:6 folded before p1:2
    h.record([(b"k", pos(p0=2), b"a"), (b"k", pos(p0=10), b"b"),
              (b"k", pos(p0=10, p1=3), b"c")], {b"k": None})
    h.record([(b"j", pos(p0=6), b"x"), (b"j", pos(p0=6, p1=2), b"y")], {b"j": b"w"})
    settled = h.settle(cut(5, 6))
    assert settled == cut(5, 1)  # k needs p1 <= 2, and then j needs p1 <= 1
    assert h.at(b"k", settled) == (True, b"a") and h.at(b"j", settled) == (True, b"w")
    store = _store({b"k": b"c", b"j": b"y"})
    with pytest.raises(CutMoved) as moved:
        AtCut(store, {0: h}, cut(5, 6))
    assert cut_of(parse_tokens(moved.value.extra["lower"])) == settled


def test_the_materializer_records_versions_only_while_consistent_reads_come(
        tmp_path: Path) -> None:
    """Rows applied with a history active are kept with the value before (read from the
    store before the rows are); rows applied while it is not make the floor unknown."""
    views = {"balances": BALANCES}
    store = open_store("memory", tmp_path / "b")
    m = Materializer({}, views, {"balances": store}, {"balances": "cl-b"},
                     partitions={"balances": 3}, input_ends=lambda tps: dict.fromkeys(tps, 9))
    st = m.states[("balances", 0)] = PartitionState(restored=True, history=History())
    h = st.history
    assert h is not None

    def row(balance: int, offset: int, p0: int) -> Message:
        value = json.dumps({"account": KEY, "balance": balance, "count": 1,
                            "last_update": 0}).encode()
        return Message("cl-b", 0, offset, KEY.encode(), value,
                       [(POSITION_HEADER, f"{T}:0:{p0}".encode())])

    m.apply([row(5, 0, 1)])  # nobody asked: not kept
    assert not h.chains and h.floor is None
    h.activate()
    h.floor_at({(T, 0): 2})
    m.apply([row(7, 1, 2), row(9, 2, 3)])
    def balance_at(p0: int) -> int:
        changed, value = h.at(KEY.encode(), cut(p0, 0))
        assert changed and value is not None
        return int(json.loads(value)["balance"])

    assert [balance_at(1), balance_at(2), balance_at(3)] == [5, 7, 9]  # 5: the value before
    h.active_until = 0.0  # a quiet minute later
    m.apply([row(11, 3, 4)])
    assert not h.chains and h.floor is None
