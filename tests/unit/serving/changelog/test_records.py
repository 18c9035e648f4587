"""One poll's records of one changelog partition read in one loop (``records.py``):
rows, markers and skipped records in their order, each put with its own offset."""

from __future__ import annotations

import json
from typing import Any

from fakes import Message

from streamiq.kafka.partitioner import partition_for
from streamiq.kafka.skips import Skip
from streamiq.serving.changelog.markers import InputEnds
from streamiq.serving.changelog.partition import PartitionState
from streamiq.serving.changelog.records import read_batch
from streamiq.views.bank import BALANCES
from streamiq.views.base import MARKER_HEADER, MARKER_KEY, POSITION_HEADER, TIME_HEADER
from streamiq.views.rows import RowCheck


def _key(n: int) -> bytes:
    """The ``n``-th account in partition 0 of 2."""
    return [k for k in (f"a{i}".encode() for i in range(100))
            if partition_for(k, 2) == 0][n]


def _row(key: bytes, offset: int) -> Message:
    value = json.dumps({"account": key.decode(), "balance": offset}).encode()
    return Message("cl", 0, offset, key, value,
                   [(POSITION_HEADER, b'{"in":{"0":1}}'), (TIME_HEADER, b"1700000000000")],
                   (1, 1_700_000_000_001))


def _read(st: PartitionState, records: list[Any]) -> tuple[Any, dict[str, dict[int, int]],
                                                           list[tuple[int, str]], list[bytes]]:
    position: dict[str, dict[int, int]] = {}
    skipped: list[tuple[int, str]] = []
    timed: list[bytes] = []

    def skip(offset: int, reason: str, exc: Exception) -> None:
        assert isinstance(exc, Skip) or reason == "undecodable"
        skipped.append((offset, reason))

    got = read_batch(records, 0, st, RowCheck(BALANCES, 2),
                     InputEnds(lambda tps: dict.fromkeys(tps, 100)), position, skip,
                     lambda ts, appended: timed.append(ts))
    return got, position, skipped, timed


def test_rows_markers_and_skips_keep_their_order_and_each_put_its_offset() -> None:
    a, b, wrong = _key(0), _key(1), next(
        k for k in (f"a{i}".encode() for i in range(100)) if partition_for(k, 2) == 1)
    records = [
        _row(a, 0),
        Message("cl", 0, 1, a, b"not json"),
        Message("cl", 0, 2, MARKER_KEY, json.dumps({"offsets": {"in": {"0": 7}}}).encode(),
                [(MARKER_HEADER, b"1")]),
        _row(wrong, 3),  # a key of the other partition
        Message("cl", 0, 4, b, None),  # a tombstone
        _row(b, 5),
    ]
    got, position, skipped, timed = _read(PartitionState(restored=True), records)
    assert [k for k, _ in got.puts] == [a, b, b] and got.puts[1] == (b, None)
    assert got.offsets == [0, 4, 5]
    assert skipped == [(1, "not_json"), (3, "wrong_partition")]
    assert got.marked and position == {"in": {0: 7}}
    assert [k for k, _, _ in got.versions] == [a, b]  # the tombstone carries none
    assert timed == [b"1700000000000"] * 2


def test_a_partition_restoring_keeps_no_versions_and_measures_nothing() -> None:
    got, _, skipped, timed = _read(PartitionState(restored=False), [_row(_key(0), 0)])
    assert len(got.puts) == 1 and got.versions == [] and timed == [] and skipped == []
    assert not got.marked
