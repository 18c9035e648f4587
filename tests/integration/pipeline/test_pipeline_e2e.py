"""run_pipeline end to end: balances, markers, partitioning, dead letters, clean stop;
and exactly-once effect across SIGKILLs."""

from __future__ import annotations

import json
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from pipeline_harness import (
    PipelineProcess,
    changelog_state,
    input_ends,
    is_marker,
    read_topic,
    wait_caught_up,
)
from topicjunk import until

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.partitioner import partition_for
from streamiq.pipeline.deadletter import DEAD_LETTER_TOPIC

pytestmark = pytest.mark.integration


def test_run_pipeline_bank(bootstrap: str, tmp_path: Path, produce: Callable[..., None]) -> None:
    suffix = uuid.uuid4().hex[:8]
    prefix = f"e2e{suffix}."  # --topic-prefix applies to inputs, changelog and dead letters
    topic, view = f"{prefix}bank-{suffix}", f"balances-{suffix}"
    changelog = f"{prefix}balances-{suffix}-changelog"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    rnd = random.Random(7)
    txns: list[dict[str, Any]] = [
        {"account": f"acct-{rnd.randrange(25)}", "amount": rnd.randrange(-50, 100),
         "ts": 1_700_000_000_000 + i} for i in range(600)]
    produce(topic, txns[:300], keys=[t["account"] for t in txns[:300]])  # before start
    pipe = PipelineProcess(bootstrap, tmp_path / "ck", suffix, tmp_path / "pipeline.log",
                           topic_prefix=prefix).start()
    try:
        bad = [b"{not json", json.dumps({"account": "a", "ts": 1}).encode(),
               json.dumps({"account": "a", "amount": "ten", "ts": 1}).encode(),
               json.dumps({"account": "", "amount": 1, "ts": 1}).encode(), b"[1, 2]"]
        produce(topic, bad, keys=["bad"] * len(bad))
        for i in range(300, 600, 50):  # trickle
            produce(topic, txns[i:i + 50], keys=[t["account"] for t in txns[i:i + 50]],
                    linger_ms=5)
            time.sleep(0.2)
        ends = input_ends(bootstrap, topic)
        msgs = wait_caught_up(bootstrap, changelog, ends, topic, 3)
        last, markers = changelog_state(msgs)
        want: dict[str, dict[str, int]] = {}
        for t in txns:
            w = want.setdefault(t["account"], {"balance": 0, "count": 0, "last_update": 0})
            w["balance"] += t["amount"]
            w["count"] += 1
            w["last_update"] = max(w["last_update"], t["ts"])
        assert {k: {c: v[c] for c in ("balance", "count", "last_update")}
                for k, v in last.items()} == want
        assert all(v["account"] == k for k, v in last.items())
        for m in msgs:  # Kafka's default partitioner over the view key
            if not is_marker(m):
                assert m.partition() == partition_for(m.key(), 3)
        for ms in markers.values():  # one marker per partition per batch, in order
            ids = [mk["batch_id"] for mk in ms]
            assert ids == sorted(ids) and len(set(ids)) == len(ids)
        assert sorted(markers) == [0, 1, 2]
        assert len({tuple(mk["batch_id"] for mk in ms) for ms in markers.values()}) == 1

        deadline = time.monotonic() + 60
        while True:
            dead = [json.loads(m.value())
                    for m in read_topic(bootstrap, prefix + DEAD_LETTER_TOPIC)]
            dead = [d for d in dead if d["view"] == view]
            if len(dead) >= len(bad) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert sorted(d["value"] for d in dead) == sorted(b.decode() for b in bad)
        reasons = {d["value"]: d["reason"] for d in dead}
        assert reasons["{not json"].startswith("invalid JSON")
        assert reasons["[1, 2]"].startswith("invalid JSON")
        assert reasons[bad[1].decode()] == "missing field(s): amount"
        assert reasons[bad[2].decode()] == "wrong type for field(s): amount"
        assert reasons[bad[3].decode()] == "check failed: empty account"
        assert all(d["topic"] == topic and d["key"] == "bad" and d["offset"] >= 0 for d in dead)
    finally:
        rc = pipe.terminate() if pipe.proc else None
    assert rc == 0, pipe.tail()
    log = (tmp_path / "pipeline.log").read_text()
    assert "dead letter(s) ->" in log and "pipeline stopped" in log


def test_exactly_once_across_kills(bootstrap: str, tmp_path: Path) -> None:
    """SIGKILL the pipeline twice while transactions stream in; balances stay exact."""
    from confluent_kafka import Producer

    suffix = uuid.uuid4().hex[:8]
    topic, changelog = f"bank-{suffix}", f"balances-{suffix}-changelog"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    rnd = random.Random(11)
    sums: dict[str, int] = {}
    counts: dict[str, int] = {}
    stop = threading.Event()

    def stream() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                      "partitioner": "murmur2_random", "enable.idempotence": True})
        i = 0
        while not stop.is_set():
            for _ in range(20):
                acct = f"acct-{rnd.randrange(40)}"
                amt = rnd.randrange(-100, 200)
                sums[acct] = sums.get(acct, 0) + amt
                counts[acct] = counts.get(acct, 0) + 1
                p.produce(topic, key=acct,
                          value=json.dumps({"account": acct, "amount": amt, "ts": i}))
                i += 1
            p.poll(0)
            time.sleep(0.05)  # the stream's pace
        assert p.flush(30) == 0

    commits = tmp_path / "ck" / f"balances-{suffix}" / "commits"

    def committed() -> int:  # micro-batches committed so far (the checkpoint's log)
        return sum(f.name.isdigit() for f in commits.iterdir()) if commits.is_dir() else 0

    def committed_beyond(n: int) -> bool:
        return committed() > n

    producer = threading.Thread(target=stream, daemon=True)
    pipe = PipelineProcess(bootstrap, tmp_path / "ck", suffix, tmp_path / "pipeline.log")
    scratch_root = tmp_path / "tmp"  # the pipeline's temp dir: its Spark scratch goes there
    scratch_root.mkdir()
    pipe.env["TMPDIR"] = str(scratch_root)
    scratch = scratch_root / f"streamiq-spark-{os.getuid()}"
    producer.start()
    kills = 0
    try:
        for _ in range(2):
            before = committed()
            pipe.start()
            # this run streams (a batch of its own committed), then it dies at a random
            # point of a later batch
            until(partial(committed_beyond, before), "a batch of this run", 180)
            time.sleep(rnd.uniform(0.0, 2.0))  # a random point of a later batch (pacing)
            pipe.kill()
            kills += 1
        before = committed()
        pipe.start()
        # the last run streams too: a batch of its own committed while records arrive
        until(partial(committed_beyond, before), "a batch of the last run", 180)
        # Spark's scratch of the killed runs (RocksDB working copies) was swept at this
        # start: only the running pipeline's is left
        assert pipe.proc is not None
        assert [d.name for d in scratch.iterdir()] == [str(pipe.proc.pid)]
        assert any((scratch / str(pipe.proc.pid)).iterdir())
        stop.set()
        producer.join(60)
        ends = input_ends(bootstrap, topic)
        msgs = wait_caught_up(bootstrap, changelog, ends, topic, 3, timeout=180)
        last, _ = changelog_state(msgs)
        assert {k: v["balance"] for k, v in last.items()} == sums
        assert {k: v["count"] for k, v in last.items()} == counts  # no double counting
        assert sum(counts.values()) == sum(ends.values())
    finally:
        stop.set()
        rc = pipe.terminate() if pipe.proc else None
    assert kills == 2 and rc == 0, pipe.tail()
    assert not any(scratch.iterdir())  # a clean stop leaves no scratch folder behind
