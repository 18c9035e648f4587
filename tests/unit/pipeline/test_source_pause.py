"""The source's lifecycle options: a paused source offers no new data, and a new
query may run its first micro-batch at once (empty when there is nothing to read)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable

from streamiq.pipeline.kafka_io import EndProbe
from streamiq.pipeline.options import EARLIEST, TP, KafkaOptions, OffsetJson, Offsets, parse_options
from streamiq.pipeline.source import KafkaStreamReader

T0: TP = ("t", 0)


class Probe(EndProbe):
    """Ends and lows as a broker would report them (no broker)."""

    def __init__(self, opts: KafkaOptions, end: int, low: int = 0) -> None:
        super().__init__(opts)
        self.end, self.lo = end, low

    def partitions(self) -> list[TP]:
        return [T0]

    def ends(self, tps: list[TP], hint: Mapping[TP, int] | None = None) -> Offsets:
        return {T0: self.end}

    def low(self, tp: TP) -> int:
        return self.lo


def reader(end: int, **opts: str) -> KafkaStreamReader:
    r = KafkaStreamReader(parse_options({"subscribe": "t", "kafka.bootstrap.servers": "x:1",
                                         **opts}, streaming=True))
    r._probe = Probe(r.opts, end)
    return r


def latest(r: KafkaStreamReader, start: int) -> OffsetJson:
    return r.latestOffset({"t": {"0": start}}, ReadAllAvailable())


def test_a_new_query_on_an_empty_topic_waits_for_data_by_default() -> None:
    assert latest(reader(0), EARLIEST) == {"t": {"0": EARLIEST}}  # no batch: start == end


def test_empty_first_batch_runs_a_new_querys_first_batch_at_once() -> None:
    r = reader(0, emptyFirstBatch="true")
    assert latest(r, EARLIEST) == {"t": {"0": 0}}  # start != end: batch 0, reading nothing
    assert r.partitions({"t": {"0": EARLIEST}}, {"t": {"0": 0}}) == []
    assert list(r.read(InputPartition(None))) == []  # Spark's placeholder for an empty plan
    assert latest(r, 0) == {"t": {"0": 0}}  # once committed: no more empty batches


def test_a_paused_source_offers_no_new_data(tmp_path: Path) -> None:
    pause = tmp_path / "pause"
    r = reader(10, pauseWhenExists=str(pause))
    assert latest(r, 4) == {"t": {"0": 10}}
    pause.touch()
    assert latest(r, 4) == {"t": {"0": 4}}  # the end is the start: no micro-batch
    pause.unlink()
    assert latest(r, 4) == {"t": {"0": 10}}


@pytest.mark.parametrize("value", ["yes", "2"])
def test_empty_first_batch_must_be_a_boolean(value: str) -> None:
    with pytest.raises(ValueError, match="emptyFirstBatch"):
        parse_options({"subscribe": "t", "kafka.bootstrap.servers": "x:1",
                       "emptyFirstBatch": value}, streaming=True)
