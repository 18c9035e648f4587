"""The ``streamiq`` sink under a user's own query: exact changelog across a SIGKILL,
catalog records, errors at start() naming the option, append mode (micro-batch: the rate
source is not one real-time mode reads)."""

from __future__ import annotations

import json
import logging
import random
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import user_query
from pipeline_harness import (
    HERE,
    PipelineProcess,
    changelog_state,
    input_ends,
    is_marker,
    read_topic,
    wait_caught_up,
)

import streamiq
from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.partitioner import partition_for
from streamiq.pipeline.publish import read_catalog

pytestmark = pytest.mark.integration


def _event(rnd: random.Random, i: int) -> dict[str, Any]:
    return {"user": f"u{rnd.randrange(user_query.USERS)}", "page": f"/p{rnd.randrange(6)}",
            "ms": rnd.randrange(1, 500), "ts": 1_700_000_000_000 + i}


def test_user_query_changelog_exact_across_sigkill(bootstrap: str, tmp_path: Path) -> None:
    """Join + aggregate written through the sink; SIGKILL mid-stream and restart: the
    changelog's final state equals the ground truth, keyed and partitioned by contract."""
    from confluent_kafka import Producer

    suffix = uuid.uuid4().hex[:8]
    topic, view, cluster = f"views-{suffix}", f"page_views_{suffix}", f"c{suffix}"
    changelog = f"{view}-changelog"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    rnd, stop = random.Random(5), threading.Event()
    events: list[dict[str, Any]] = []

    def stream() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                      "partitioner": "murmur2_random", "enable.idempotence": True})
        while not stop.is_set():
            for _ in range(20):
                e = _event(rnd, len(events))
                events.append(e)
                p.produce(topic, key=e["user"], value=json.dumps(e))
            p.poll(0)
            time.sleep(0.05)  # the stream's pace
        assert p.flush(30) == 0

    cmd = [sys.executable, str(HERE / "user_query.py"), bootstrap, topic, view, cluster,
           str(tmp_path / "ck")]
    proc = PipelineProcess(bootstrap, tmp_path / "ck", suffix, tmp_path / "user.log", cmd=cmd)
    producer = threading.Thread(target=stream, daemon=True)
    producer.start()
    try:
        proc.start()
        _wait_for_marker(bootstrap, changelog)  # a batch committed: the kill is mid-stream
        time.sleep(rnd.uniform(0.5, 3.0))  # a random point of a later batch (pacing)
        proc.kill()
        killed_at = _last_batch(bootstrap, changelog)
        proc.start()
        # the restarted query streams too: a batch of its own marked while records arrive
        _wait_for_marker(bootstrap, changelog, after=killed_at)
        stop.set()
        producer.join(60)
        ends = input_ends(bootstrap, topic)
        msgs = wait_caught_up(bootstrap, changelog, ends, topic, 3, timeout=180)
    finally:
        stop.set()
        proc.kill()
    last, markers = changelog_state(msgs)
    assert last == user_query.truth(events) and sum(ends.values()) == len(events)
    assert sorted(markers) == [0, 1, 2]
    for m in msgs:
        if not is_marker(m):
            assert m.partition() == partition_for(m.key(), 3)
    spec = read_catalog({"bootstrap.servers": bootstrap}, f"_streamiq-{cluster}-catalog")[view]
    assert spec.key_columns == (("country", "string"), ("page", "string"))
    assert spec.value_columns == (("views", "bigint"), ("total_ms", "bigint"),
                                  ("last_seen", "timestamp"))
    assert (spec.changelog_topic, spec.partitions, spec.windowed, spec.is_global) == (
        changelog, 3, False, False)


def _last_batch(bootstrap: str, changelog: str) -> int:
    """The highest batch id of the markers on ``changelog`` (-1: none yet)."""
    markers = changelog_state(read_topic(bootstrap, changelog))[1]
    return max((int(mk["batch_id"]) for ms in markers.values() for mk in ms), default=-1)


def _wait_for_marker(bootstrap: str, changelog: str, timeout: float = 120.0,
                     after: int = -1) -> None:
    """Until ``changelog`` holds a marker of a batch later than ``after``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ensure_topics({"bootstrap.servers": bootstrap}, {changelog: 3})
        if _last_batch(bootstrap, changelog) > after:
            return
        time.sleep(0.5)
    raise AssertionError(f"no marker of a batch after {after} on {changelog} within "
                         f"{timeout:.0f} s")


def _sink(df: Any, bootstrap: str, tmp_path: Path, **options: str | None) -> Any:
    w = streamiq.sink(df).option("kafka.bootstrap.servers", bootstrap)
    w = w.option("checkpointLocation", str(tmp_path / uuid.uuid4().hex))
    for k, v in options.items():
        w = w.option(k, v) if v is not None else w
    return w


def test_bad_options_and_incompatible_views_fail_at_start(spark: Any, bootstrap: str,
                                                          tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    suffix = uuid.uuid4().hex[:8]
    cluster, view = f"c{suffix}", f"v{suffix}"
    rate = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    df = rate.groupBy((F.col("value") % 7).cast("string").alias("k")).agg(
        F.count(F.lit(1)).alias("n"))
    ok = {"view": view, "key": "k", "cluster": cluster}
    cases: list[tuple[dict[str, str | None], str]] = [
        ({"view": None}, "option 'view'"), ({"key": "nope"}, "option 'key'"),
        ({"partitions": "0"}, "option 'partitions'"), ({"view": "a b"}, "option 'view'"),
        ({"bogus": "1"}, "option 'bogus'")]
    for bad, named in cases:
        with pytest.raises(ValueError, match=named):
            _sink(df, bootstrap, tmp_path, **{**ok, **bad}).start()
    with pytest.raises(ValueError, match=r"option 'kafka\.bootstrap\.servers'"):
        streamiq.sink(df).options(**ok, checkpointLocation=str(tmp_path / "x")).start()
    with pytest.raises(ValueError, match="outputMode 'complete'"):
        _sink(df, bootstrap, tmp_path, **ok).outputMode("complete").start()
    assert not spark.streams.active  # nothing was started

    q = _sink(df, bootstrap, tmp_path, **ok).start()
    q.stop()
    spec = read_catalog({"bootstrap.servers": bootstrap}, f"_streamiq-{cluster}-catalog")[view]
    assert spec.key_columns == (("k", "string"),) and spec.value_columns == (("n", "bigint"),)
    retyped = rate.groupBy((F.col("value") % 7).cast("string").alias("k")).agg(
        F.sum("value").cast("double").alias("n"))
    with pytest.raises(ValueError, match=f"view '{view}'.*value column 'n' changed type "
                                         "from bigint to double"):
        _sink(retyped, bootstrap, tmp_path, **ok).start()
    rekeyed = df.withColumnRenamed("k", "key")
    with pytest.raises(ValueError, match=f"view '{view}'.*key columns changed from "
                                         r"\(k string\) to \(key string\)"):
        _sink(rekeyed, bootstrap, tmp_path, **{**ok, "key": "key"}).start()
    wider = rate.groupBy((F.col("value") % 7).cast("string").alias("k")).agg(
        F.count(F.lit(1)).alias("n"), F.max("value").alias("top"))
    _sink(wider, bootstrap, tmp_path, **ok).start().stop()  # a value column added: fine
    spec = read_catalog({"bootstrap.servers": bootstrap}, f"_streamiq-{cluster}-catalog")[view]
    assert spec.value_columns == (("n", "bigint"), ("top", "bigint"))


def test_append_mode_rows_and_markers(spark: Any, bootstrap: str, tmp_path: Path,
                                      caplog: pytest.LogCaptureFixture) -> None:
    """Append mode through streamiq.sink: rows and markers. Real-time mode takes update
    mode only: the query runs in micro-batch, saying why in one line."""
    from pyspark.sql import functions as F

    suffix = uuid.uuid4().hex[:8]
    view = f"a{suffix}"
    rate = spark.readStream.format("rate").option("rowsPerSecond", 20).load()
    rows = rate.select((F.col("value") % 5).cast("string").alias("k"),
                       F.col("value").alias("v"), F.col("timestamp").alias("at"))
    with caplog.at_level(logging.WARNING, "streamiq.sink"):
        q = (streamiq.sink(rows).option("view", view).option("key", "k")
             .option("kafka.bootstrap.servers", bootstrap).option("cluster", f"c{suffix}")
             .option("checkpointLocation", str(tmp_path / "ck")).outputMode("append").start())
    lines = [r.getMessage() for r in caplog.records if r.name == "streamiq.sink"]
    assert lines == ["streamiq.sink: real-time mode refuses it: The output mode Append is not "
                     "supported; the query runs in micro-batch mode"]
    try:
        _wait_for_marker(bootstrap, f"{view}-changelog")
        deadline = time.monotonic() + 60
        while q.lastProgress is None or q.lastProgress["batchId"] < 2:
            assert time.monotonic() < deadline and q.isActive, q.exception()
            time.sleep(0.2)
    finally:
        q.stop()
    last, markers = changelog_state(read_topic(bootstrap, f"{view}-changelog"))
    assert sorted(markers) == [0, 1, 2] and set(last) <= {"0", "1", "2", "3", "4"} and last
    for k, row in last.items():
        assert row["k"] == k and int(row["v"]) % 5 == int(k) and isinstance(row["at"], int)
    assert all(ms[-1]["offsets"] == {} for ms in markers.values())  # rate: no Kafka offsets
