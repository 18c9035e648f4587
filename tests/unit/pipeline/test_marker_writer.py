"""The markers' offset-log parsing and producer settings (no Spark, no broker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamiq.pipeline.markers import Markers, batch_offsets, last_committed, producer_conf


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


def test_batch_offsets_merges_kafka_sources_and_skips_others(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text(
        'v1\n{"batchWatermarkMs":0}\n{"a": {"0": 3}}\n42\n{"b": {"1": 5}}\n')
    (tmp_path / "offsets" / "1").write_text('v1\n{"batchWatermarkMs":0}\n7\n')
    assert batch_offsets(str(tmp_path), 0) == {"a": {"0": 3}, "b": {"1": 5}}
    assert batch_offsets(str(tmp_path), 1) == {}


def test_last_committed_is_the_newest_commit(tmp_path: Path) -> None:
    assert last_committed(str(tmp_path)) is None
    (tmp_path / "commits").mkdir()
    assert last_committed(str(tmp_path)) is None
    for n in ("0", "1", "10", ".10.crc"):
        (tmp_path / "commits" / n).write_text("v1\n")
    assert last_committed(str(tmp_path)) == 10
    assert last_committed("hdfs://nn/ck") is None  # not read where it is not local


def test_a_batch_spark_purged_is_left_to_a_newer_batchs_marker(tmp_path: Path) -> None:
    """Under load the progress handler fell 20 batches behind (minBatchesToRetain) and
    the pipeline died on "no offset log entry for batch 282": a purged batch's offsets
    are covered by the newer batch whose marker is still to come, so none is written
    for it (nothing is produced: the broker here does not exist)."""
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "30").write_text('v1\n{"batchWatermarkMs":0}\n{"in": {"0": 9}}\n')
    m = Markers({"bootstrap.servers": "127.0.0.1:1"}, "v-changelog", 3, str(tmp_path))
    assert m.batch(10, timeout=1) == {}
    assert m.last is None
    with pytest.raises(RuntimeError, match="no offset log entry for batch 31"):
        m.batch(31, timeout=1)  # not written yet (not purged): still an error


def test_a_closed_writer_lets_its_producer_go(tmp_path: Path) -> None:
    """Closed when its query stops: the log server's poll finds no producer (a stopped
    in-process pipeline's producer printed a gone broker's refusals every 10 s)."""
    m = Markers({"bootstrap.servers": "127.0.0.1:1"}, "v-changelog", 3, str(tmp_path))
    polled: list[float] = []

    class Producer:
        def poll(self, timeout: float) -> int:
            polled.append(timeout)
            return 0

    m._producer = Producer()
    m._serve()
    assert polled == [0]
    m.close()
    m._serve()
    assert polled == [0] and m._producer is None
