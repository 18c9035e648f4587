"""The changelog row validator: what a node stores, and why it refuses the rest."""

from __future__ import annotations

import json
from typing import Any

import pytest

from streamiq.kafka.partitioner import partition_for
from streamiq.kafka.skips import Skip
from streamiq.views.bank import BALANCES
from streamiq.views.base import MARKER_KEY, View, store_key
from streamiq.views.catalog import ViewSpec
from streamiq.views.orders import ORDER_COUNTS, ORDER_COUNTS_1M
from streamiq.views.rows import MAX_DEPTH, MAX_RECORD_BYTES, check_row, fits

P = 3


def _check(view: View, key: str | bytes | None, row: Any, partition: int | None = None
           ) -> tuple[bytes, bytes | None]:
    raw = key.encode() if isinstance(key, str) else key
    value = row if row is None or isinstance(row, bytes) else json.dumps(row).encode()
    part = partition if partition is not None else partition_for(raw or b"", P)
    return check_row(view, raw, value, part, P)


def _reason(view: View, key: str | bytes | None, row: Any, partition: int | None = None
            ) -> str:
    with pytest.raises(Skip) as err:
        _check(view, key, row, partition)
    return err.value.reason


BAL = {"account": "a1", "balance": 5, "count": 1, "last_update": 9}
ORD = {"store": "s1", "type": "GENERAL", "count": 2, "revenue": 7.5}
WIN = {**ORD, "window_start": 60_000, "window_end": 120_000}


def test_good_rows_are_stored_as_they_came() -> None:
    assert _check(BALANCES, "a1", BAL) == (b"a1", json.dumps(BAL).encode())
    big = {**BAL, "balance": 10**30}  # decimal(38,0) beyond 64 bits: exact digits kept
    assert _check(BALANCES, "a1", big)[1] == json.dumps(big).encode()
    assert _check(ORDER_COUNTS, "s1|GENERAL", {**ORD, "revenue": 7})[0] == b"s1|GENERAL"
    assert _check(ORDER_COUNTS, "s1|GENERAL", {**ORD, "revenue": None})[0] == b"s1|GENERAL"
    assert _check(ORDER_COUNTS_1M, "s1|GENERAL", WIN)[0] == store_key("s1|GENERAL", 60_000)
    assert _check(BALANCES, "a1", None) == (b"a1", None)  # a tombstone
    # value columns a later version of the view added may be missing; extra ones pass
    assert _check(BALANCES, "a1", {"account": "a1", "balance": 1, "new": [1]})[0] == b"a1"


def test_a_row_in_another_partition_than_its_keys_is_refused() -> None:
    right = partition_for(b"a1", P)
    assert _reason(BALANCES, "a1", BAL, partition=(right + 1) % P) == "wrong_partition"
    assert _reason(BALANCES, "a1", None, partition=(right + 1) % P) == "wrong_partition"
    # unknown partition count (a view the materializer was not told about): not checked
    assert check_row(BALANCES, b"a1", json.dumps(BAL).encode(), (right + 1) % P, None)


@pytest.mark.parametrize(("key", "row", "reason"), [
    ("x", {"count": 1}, "missing_column"),  # the aggregate's IndexError of issue 28
    ("s1|GENERAL", {"store": "s1", "count": 1}, "missing_column"),
    ("s1|GENERAL", {**ORD, "type": "RESTAURANT"}, "key_mismatch"),
    ("x|y|z", {**ORD}, "key_mismatch"),
    ("s1|GENERAL", {**ORD, "count": "many"}, "wrong_type"),
    ("s1|GENERAL", {**ORD, "count": 1.5}, "wrong_type"),
    ("s1|GENERAL", {**ORD, "count": True}, "wrong_type"),
    ("s1|GENERAL", {**ORD, "count": 1 << 63}, "wrong_type"),
    ("s1|GENERAL", {**ORD, "revenue": "7.5"}, "wrong_type"),
    ("s1|GENERAL", {**ORD, "revenue": [7.5]}, "wrong_type"),
    ("1|GENERAL", {**ORD, "store": 1}, "wrong_type"),  # key text agrees, type does not
])
def test_a_row_that_does_not_fit_the_schema_is_refused(key: str, row: dict[str, Any],
                                                       reason: str) -> None:
    assert _reason(ORDER_COUNTS, key, row) == reason


@pytest.mark.parametrize(("row", "reason"), [
    ({**ORD}, "bad_window"),
    ({**ORD, "window_start": "soon"}, "bad_window"),
    ({**ORD, "window_start": 1.5}, "bad_window"),
    ({**ORD, "window_start": 1 << 70}, "bad_window"),
    ({**WIN, "window_end": 60_000}, "bad_window"),  # not after the start
    ({**WIN, "window_end": "later"}, "bad_window"),
    (None, "bad_window"),  # a windowed view has no tombstones
])
def test_windowed_rows_need_their_bounds(row: Any, reason: str) -> None:
    assert _reason(ORDER_COUNTS_1M, "s1|GENERAL", row) == reason


@pytest.mark.parametrize(("key", "value", "reason"), [
    (None, json.dumps(BAL).encode(), "no_key"),
    (b"\xff\xfe", json.dumps(BAL).encode(), "bad_key"),
    (MARKER_KEY, json.dumps(BAL).encode(), "bad_key"),  # a marker without its header
    ("a1", b"[" * 5000 + b"]" * 5000, "not_json"),  # orjson's own depth limit
    ("a1", b"\x00\x9f\x92\x96" * 64, "not_json"),
    ("a1", b'{"balance": NaN}', "not_json"),
    ("a1", b'{"account":"a1"} {"x":1}', "not_json"),
    ("a1", b"7", "not_json"),
    ("a1", b'{"account":"a1","pad":"' + b"x" * MAX_RECORD_BYTES + b'"}', "too_large"),
])
def test_records_that_are_not_rows_are_refused(key: Any, value: bytes, reason: str) -> None:
    assert _reason(BALANCES, key, value) == reason


def test_values_nested_deeper_than_the_limit_are_refused() -> None:
    deep: Any = 1
    for _ in range(MAX_DEPTH):
        deep = [deep]
    assert _check(BALANCES, "a1", {**BAL, "extra": deep[0]})  # MAX_DEPTH levels in all
    assert _reason(BALANCES, "a1", {**BAL, "extra": deep}) == "too_deep"


def test_catalog_views_check_their_declared_types() -> None:
    spec = ViewSpec(name="pv", key_columns=(("user", "string"), ("day", "int")),
                    value_columns=(("n", "bigint"), ("tags", "array<string>"),
                                   ("at", "timestamp"), ("ok", "boolean"),
                                   ("avg", "decimal(10,2)"), ("odd", "interval")),
                    changelog_topic="pv-changelog", partitions=P)
    view = spec.to_view()
    row = {"user": "u", "day": 3, "n": 1, "tags": ["a"], "at": 1_700_000_000_000,
           "ok": False, "avg": 1.25, "odd": {"anything": 1}}
    assert _check(view, "u|3", row)[0] == b"u|3"
    for col, bad in (("tags", "a"), ("at", "2024-01-01"), ("ok", 0), ("avg", "1.25"),
                     ("day", "3")):
        assert _reason(view, "u|3", {**row, col: bad}) in ("wrong_type", "key_mismatch")
    assert fits("varchar(10)", "x") and not fits("varchar(10)", 1)
    assert fits("map<string,int>", {}) and fits("struct<a:int>", {"a": 1})


def test_key_text_is_compared_only_where_the_sink_writes_it_so() -> None:
    """Arrow casts a timestamp key column to text unlike its epoch-ms value, so such a
    column is not compared with the key; a view without types compares strings only."""
    spec = ViewSpec(name="ev", key_columns=(("at", "timestamp"), ("ok", "boolean")),
                    value_columns=(("n", "bigint"),), changelog_topic="ev-changelog",
                    partitions=P)
    row = {"at": 1_700_000_000_000, "ok": True, "n": 1}
    assert _check(spec.to_view(), "2023-11-14 22:13:20|true", row)
    assert _reason(spec.to_view(), "2023-11-14 22:13:20|false", row) == "key_mismatch"
    untyped = View(name="u", source_topics=(), value_schema="", transform=lambda df: df,
                   key_columns=("at", "who"), value_columns=("n",))
    assert _check(untyped, "2023-11-14 22:13:20|bo", {"at": 1_700_000_000_000, "who": "bo"})
    assert _reason(untyped, "x|bo", {"at": 1, "who": "al"}) == "key_mismatch"
    assert _check(untyped, "|bo", {"at": None, "who": "bo"})  # null: "" as Arrow fills it
