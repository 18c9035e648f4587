"""Offset-log parsing and producer settings of the changelog sink (no Spark, no broker)."""

from __future__ import annotations

import json
from pathlib import Path

from streamiq.pipeline.sink import batch_offsets, producer_conf


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
