"""Offset-log parsing, producer settings and row encoding of the changelog writer (no
Spark, no broker)."""

from __future__ import annotations

import json
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

from streamiq.pipeline.sink import RowEncoder, batch_offsets, producer_conf


def test_batch_offsets_reads_the_offset_log(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "4").write_text(
        'v1\n{"batchWatermarkMs":0}\n{"in": {"0": 12, "1": -2}}\n')
    assert batch_offsets(str(tmp_path), 4) == {"in": {"0": 12, "1": 0}}
    assert batch_offsets(str(tmp_path), 5) is None
    assert batch_offsets(f"file://{tmp_path}", 4) == {"in": {"0": 12, "1": 0}}


def test_producer_is_idempotent_with_java_partitioner() -> None:
    conf = producer_conf({"bootstrap.servers": "h:1", "security.protocol": "SSL"})
    assert conf["enable.idempotence"] is True and conf["acks"] == "all"
    assert conf["partitioner"] == "murmur2_random"
    assert conf["security.protocol"] == "SSL"
    json.dumps(conf)


def _batch() -> Any:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    window = pa.StructArray.from_arrays(
        [pa.array([60_000_000, 0, None], ts), pa.array([120_000_000, 60_000_000, None], ts)],
        names=["start", "end"])
    return pa.record_batch({
        "store": pa.array(["s-1", "s|2", None]),
        "n": pa.array([7, -1, None], pa.int32()),
        "ok": pa.array([True, False, None]),
        "day": pa.array([date(2024, 1, 2), None, date(1969, 12, 31)]),
        "window": window,
        "balance": pa.array([Decimal(2**70), Decimal(-3), None], pa.decimal128(38, 0)),
        "price": pa.array([Decimal("12.50"), Decimal("0.01"), None], pa.decimal128(10, 2)),
        "avg": pa.array([1.0, 0.25, None]),
        "seen": pa.array([1_500, -1_500, None], ts),
        "raw": pa.array([b"\x00\xff", None, b""]),
    })


def test_keys_are_spark_text_joined_by_bar() -> None:
    enc = RowEncoder(_batch().schema.names, ["store", "n", "ok", "day"])
    assert enc.keys(_batch()) == ["s-1|7|true|2024-01-02", "s|2|-1|false|", "|||1969-12-31"]
    assert RowEncoder(["store"], ["store"]).keys(_batch()) == ["s-1", "s|2", ""]


def test_values_follow_the_changelog_contract() -> None:
    enc = RowEncoder(_batch().schema.names, ["store"])
    raw = enc.values(_batch())
    rows = [json.loads(v) for v in raw]
    assert list(rows[0]) == ["store", "n", "ok", "day", "window_start", "window_end",
                             "balance", "price", "avg", "seen", "raw"]
    assert rows[0]["window_start"] == 60_000 and rows[0]["window_end"] == 120_000
    assert rows[0]["balance"] == 2**70 and b'"balance":1180591620717411303424,' in raw[0]
    assert b'"price":12.50,' in raw[0] and rows[1]["balance"] == -3
    assert rows[0]["day"] == "2024-01-02" and rows[0]["ok"] is True and rows[0]["avg"] == 1.0
    assert rows[0]["seen"] == 1 and rows[1]["seen"] == -2  # epoch ms, floored
    assert rows[0]["raw"] == "AP8=" and rows[1]["raw"] is None
    assert rows[2]["window_start"] is None and rows[2]["store"] is None


def test_batch_offsets_merges_kafka_sources_and_skips_others(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text(
        'v1\n{"batchWatermarkMs":0}\n{"a": {"0": 3}}\n42\n{"b": {"1": 5}}\n')
    (tmp_path / "offsets" / "1").write_text('v1\n{"batchWatermarkMs":0}\n7\n')
    assert batch_offsets(str(tmp_path), 0) == {"a": {"0": 3}, "b": {"1": 5}}
    assert batch_offsets(str(tmp_path), 1) == {}
