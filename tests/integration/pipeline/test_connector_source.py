"""The pipeline reads through Spark's own Kafka source (issue 25): each batch's marker
names the batch's end offset of every input partition, a partition the batch read no
record of included."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from pipeline_harness import PipelineProcess, changelog_state, wait_caught_up

from streamiq.kafka.admin import ensure_topics

pytestmark = pytest.mark.integration


def test_markers_name_every_partitions_end(bootstrap: str, tmp_path: Path,
                                           produce: Callable[..., None]) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic, view = f"bank-{suffix}", f"balances-{suffix}"
    changelog = f"{view}-changelog"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    log = tmp_path / "pipeline.log"
    pipe = PipelineProcess(bootstrap, tmp_path / "ck", suffix, log).start(timeout=300)
    try:
        txn = {"account": "acct-1", "amount": 5, "ts": 1_700_000_000_000}
        produce(topic, [txn] * 7, partition=0, keys=["acct-1"] * 7)
        # partitions 1 and 2 hold nothing yet: their end (0) is named all the same
        wait_caught_up(bootstrap, changelog, {"0": 7, "1": 0, "2": 0}, topic, 3)
        produce(topic, [txn] * 4, partition=2, keys=["acct-1"] * 4)
        msgs = wait_caught_up(bootstrap, changelog, {"0": 7, "1": 0, "2": 4}, topic, 3)
    finally:
        rc = pipe.terminate() if pipe.proc else None
    assert rc == 0, pipe.tail()
    last, markers = changelog_state(msgs)
    assert last["acct-1"]["balance"] == 55 and last["acct-1"]["count"] == 11
    for ms in markers.values():  # every marker: every partition, never going back
        ends = [m["offsets"][topic] for m in ms]
        assert all(sorted(e) == ["0", "1", "2"] for e in ends)
        for p in ("0", "1", "2"):
            seen = [e[p] for e in ends]
            assert seen == sorted(seen)
    # Spark's Kafka source keeps the offsets it started from in the checkpoint (the
    # pipeline has no other source since the Python one was removed)
    initial = (tmp_path / "ck" / view / "sources" / "0" / "0").read_text()
    assert "v1\n" in initial and topic in initial
