"""Scan merge, cursors and aggregate partials over a store (in memory: the store
contract, tests/unit/state, holds it to what RocksDB does)."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from streamiq.serving.engines.aggregate import (
    aggregate_partitions,
    finish,
    merge_partials,
    parse_aggs,
    parse_group_by,
)
from streamiq.serving.engines.scan import (
    KeyRange,
    cursor_cut,
    decode_cursor,
    encode_cursor,
    merge_rows,
    scan_partitions,
)
from streamiq.state import Checkpoint, MemoryStore
from streamiq.views.base import store_key
from streamiq.views.orders import ORDER_COUNTS, ORDER_COUNTS_1M

P = 3
Orders = tuple[MemoryStore, dict[str, dict[str, Any]]]


@pytest.fixture
def orders() -> Orders:
    store = MemoryStore()
    truth: dict[str, dict[str, Any]] = {}
    puts: dict[int, list[tuple[bytes, bytes | None]]] = {p: [] for p in range(P)}
    for s in range(20):
        for t in ("GENERAL", "RESTAURANT"):
            row: dict[str, Any] = {"store": f"s{s:02d}", "type": t, "count": s + 1,
                                   "revenue": 2.5 * s}
            key = ORDER_COUNTS.key_of(row)
            truth[key] = row
            puts[ORDER_COUNTS.partition_of(key, P)].append((key.encode(), json.dumps(row).encode()))
    for p, rows in puts.items():
        store.apply(p, rows, Checkpoint(offset=len(rows)))
    return store, truth


def test_scan_pages_merge_in_key_order(orders: Orders) -> None:
    store, truth = orders
    seen: list[str] = []
    after = None
    while True:
        rng = KeyRange.build(prefix="s0", after=after)
        part = scan_partitions(ORDER_COUNTS, store, range(P), rng, 7)
        rows, cursor = merge_rows(ORDER_COUNTS, [part], 7)
        seen += [r["key"] for r in rows]
        if cursor is None:
            break
        after = decode_cursor("order_counts", cursor)
    assert seen == sorted(k for k in truth if k.startswith("s0"))


def test_scan_range_bounds(orders: Orders) -> None:
    store, truth = orders
    rng = KeyRange.build("s05", "s07|RESTAURANT")
    rows, cursor = merge_rows(ORDER_COUNTS, [scan_partitions(ORDER_COUNTS, store, range(P),
                                                              rng, 100)], 100)
    assert [r["key"] for r in rows] == sorted(k for k in truth if "s05" <= k < "s07|RESTAURANT")
    assert cursor is None


@pytest.mark.parametrize("bad", ["x", "!!!", encode_cursor("balances", b"a")])
def test_bad_cursor(bad: str) -> None:
    with pytest.raises(ValueError, match="cursor"):
        decode_cursor("order_counts", bad)


def test_a_consistent_scans_cursor_carries_its_cut() -> None:
    plain, cut = encode_cursor("v", b"k"), encode_cursor("v", b"k", "in:0:5,in:1:7")
    assert decode_cursor("v", plain) == decode_cursor("v", cut) == b"k"
    assert cursor_cut("v", plain) is None
    assert cursor_cut("v", cut) == "in:0:5,in:1:7"
    with pytest.raises(ValueError, match="belongs to view"):
        cursor_cut("w", cut)
    forged = base64.urlsafe_b64encode(json.dumps({"v": "v", "after": "6b", "cut": 5}).encode())
    with pytest.raises(ValueError, match="not a cursor"):
        cursor_cut("v", forged.decode())


def test_aggregate_partials_merge_exactly(orders: Orders) -> None:
    store, truth = orders
    cols = parse_group_by(ORDER_COUNTS, ["type"])
    aggs = parse_aggs(ORDER_COUNTS, ["sum(count)", "avg(revenue)", "min(store)", "count(*)"])
    parts = [aggregate_partitions(ORDER_COUNTS, store, [p], cols, aggs) for p in range(P)]
    merged, rows = merge_partials(aggs, parts)
    out = finish(cols, aggs, merged)
    assert rows == len(truth)
    gen = [r for r in truth.values() if r["type"] == "GENERAL"]
    assert out[0] == {"type": "GENERAL", "sum(count)": sum(r["count"] for r in gen),
                      "avg(revenue)": pytest.approx(sum(r["revenue"] for r in gen) / len(gen)),
                      "min(store)": "s00", "count(*)": len(gen)}
    assert [r["type"] for r in out] == ["GENERAL", "RESTAURANT"]


@pytest.mark.parametrize(("spec", "msg"), [
    ("median(count)", "unknown function"), ("sum(nope)", "unknown column"),
    ("sum(*)", "only count"), ("sum(store)", "key column"), ("sum count", "FUNC"),
])
def test_bad_aggs(spec: str, msg: str) -> None:
    with pytest.raises(ValueError, match=msg):
        parse_aggs(ORDER_COUNTS, [spec])


def test_unknown_group_by() -> None:
    with pytest.raises(ValueError, match="unknown column 'nope'"):
        parse_group_by(ORDER_COUNTS, ["type,nope"])


def test_window_filter() -> None:
    store = MemoryStore()
    rows = [("s1|GENERAL", w) for w in (0, 60_000, 120_000)] + [("s2|GENERAL", 60_000)]
    store.apply(0, [(store_key(k, w), json.dumps({"store": k[:2], "type": "GENERAL",
                                                   "window_start": w, "window_end": w + 60_000,
                                                   "count": 1}).encode()) for k, w in rows],
                Checkpoint(offset=4))
    part = scan_partitions(ORDER_COUNTS_1M, store, [0], KeyRange.build(wfrom=60_000,
                                                                       wto=120_000), 10)
    got, _ = merge_rows(ORDER_COUNTS_1M, [part], 10)
    assert [(r["key"], r["value"]["window_start"]) for r in got] == [
        ("s1|GENERAL", 60_000), ("s2|GENERAL", 60_000)]


def test_aggregate_groups_by_values_that_cannot_key_a_dict() -> None:
    """A group-by column holding lists or objects still groups (by the values' JSON),
    next to ordinary values, and the partials keep their JSON group keys."""
    store = MemoryStore()
    rows = [{"store": "s1", "type": t, "count": c, "revenue": 1.0}
            for t, c in [(["a", "b"], 1), (["a", "b"], 2), ({"k": 1}, 4), ("GENERAL", 8)]]
    store.apply(0, [(f"k{i}".encode(), json.dumps(r).encode()) for i, r in enumerate(rows)],
                Checkpoint(offset=len(rows)))
    aggs = parse_aggs(ORDER_COUNTS, ["sum(count)"])
    part = aggregate_partitions(ORDER_COUNTS, store, [0], ["type"], aggs)
    assert part == {"groups": {'[["a", "b"]]': [[3, 2]], '[{"k": 1}]': [[4, 1]],
                               '["GENERAL"]': [[8, 1]]}, "rows": 4}
    out = finish(["type"], aggs, merge_partials(aggs, [part, part])[0])
    assert {json.dumps(r["type"]): r["sum(count)"] for r in out} == {
        '["a", "b"]': 6, '{"k": 1}': 8, '"GENERAL"': 16}


def test_an_aggregate_with_too_many_groups_is_refused() -> None:
    from streamiq.errors import BadRequest
    from streamiq.serving.engines.aggregate import MAX_GROUPS

    store = MemoryStore()
    rows = [(f"s{i}|GENERAL".encode(), json.dumps({"store": f"s{i}", "type": "GENERAL",
                                                   "count": 1}).encode())
            for i in range(MAX_GROUPS + 1)]
    store.apply(0, rows, Checkpoint(offset=len(rows)))
    aggs = parse_aggs(ORDER_COUNTS, ["sum(count)"])
    with pytest.raises(BadRequest, match=f"more than {MAX_GROUPS} groups"):
        aggregate_partitions(ORDER_COUNTS, store, [0], ["store"], aggs)
    fine = aggregate_partitions(ORDER_COUNTS, store, [0], ["type"], aggs)
    assert fine["rows"] == MAX_GROUPS + 1 and len(fine["groups"]) == 1
    half = {"groups": {f'["s{i}"]': [1] for i in range(MAX_GROUPS // 2 + 1)}, "rows": 1}
    other = {"groups": {f'["t{i}"]': [1] for i in range(MAX_GROUPS // 2 + 1)}, "rows": 1}
    with pytest.raises(BadRequest, match="group by fewer columns"):  # merged at the entry
        merge_partials(aggs, [half, other])  # type: ignore[list-item]
