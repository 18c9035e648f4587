"""Transfers through the real pipeline in real-time mode (issue 46's bank workload).

Deposits and transfers produced straight to the bank's input topic (3 partitions, each
transfer keyed by its sender, so in another partition than its target), the pipeline
in real-time mode with hour-long batches (no marker comes during the test) and a node:
both accounts' changelog rows exact, the balances sum to the deposits, each row's
``streamiq-pos`` names, per input partition, the last record folded into it, transfers
from other partitions included; bad transfers dead-lettered with their reasons and
counted; and a lookup of the target with the transfer's position token answered with the
transfer, by its row alone, and a scan with it answered with both legs (by a tick: no
marker comes).
Before transfers, ``to`` was ignored: a transfer was a deposit to its sender.

And a balances checkpoint made before transfers (the demo's) resumes under the transfer
plan: Spark's state schema did not change.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from pipeline_harness import (
    PipelineProcess,
    changelog_state,
    dead_letter_docs,
    input_ends,
    read_topic,
    wait_caught_up,
)
from updemo import metric

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.partitioner import partition_for
from streamiq.pipeline.deadletter import DEAD_LETTER_TOPIC
from streamiq.views.base import POSITION_HEADER

pytestmark = pytest.mark.integration

ACCOUNTS = ("alice", "dave", "carol")
#: (sender, amount, target or None for a deposit): deposits, transfers in a ring, and
#: three bad transfers with the reason each is dead-lettered for
GOOD = [("alice", 100, None), ("dave", 50, None), ("carol", 20, None),
        ("alice", 30, "dave"), ("dave", 45, "carol"), ("carol", 5, "alice")]
BAD = {("alice", 1, "alice"): "check failed: transfer to the same account",
       ("dave", 1, ""): "check failed: empty transfer target (to)",
       ("carol", 1, "x" * 65): "check failed: transfer target (to) longer than 64 characters"}
Record = tuple[str, int, str | None]


def _produce(bootstrap: str, topic: str, records: list[Record], ts: int
             ) -> list[tuple[int, int]]:
    """Each record keyed by its sender (Kafka's default partitioner), in order; the
    (partition, offset) of each."""
    p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    where: list[Any] = [None] * len(records)

    def done(i: int) -> Callable[[Any, Any], None]:
        def cb(err: Any, msg: Any) -> None:
            where[i] = err if err is not None else (msg.partition(), msg.offset())
        return cb

    for i, (account, amount, to) in enumerate(records):
        doc: dict[str, Any] = {"account": account, "amount": amount, "ts": ts + i}
        if to is not None:
            doc["to"] = to
        p.produce(topic, key=account, value=json.dumps(doc), on_delivery=done(i))
        p.flush(15)  # one at a time: offsets in this order
    assert all(isinstance(w, tuple) for w in where), where
    return where


def _want(records: list[Record], at: list[tuple[int, int]], ts: int
          ) -> dict[str, dict[str, Any]]:
    """Each account's row (balance, count, last_update) and its positions, by hand, from
    the good records (the i-th produced with ``ts + i``)."""
    want: dict[str, dict[str, Any]] = {}
    for i, ((account, amount, to), (p, o)) in enumerate(zip(records, at, strict=True)):
        if (account, amount, to) in BAD:
            continue
        for who, delta in ((account, -amount), (to, amount)) if to else ((account, amount),):
            w = want.setdefault(who, {"balance": 0, "count": 0, "pos": {}})
            w["balance"] += delta
            w["count"] += 1
            w["last_update"] = ts + i
            w["pos"][p] = o
    return want


def _rows(bootstrap: str, changelog: str, want: dict[str, dict[str, Any]],
          timeout: float = 240.0) -> dict[str, Any]:
    """The changelog's last record per account, once every account's value is ``want``'s."""
    wanted = {k: {c: w[c] for c in ("balance", "count", "last_update")} for k, w in want.items()}
    deadline = time.monotonic() + timeout
    while True:
        last = {m.key().decode(): m for m in read_topic(bootstrap, changelog)
                if m.key() in {a.encode() for a in ACCOUNTS}}
        values, _ = changelog_state(list(last.values()))
        got = {k: {c: v[c] for c in ("balance", "count", "last_update")}
               for k, v in values.items()}
        if got == wanted:
            return last
        assert time.monotonic() < deadline, f"changelog rows {got}, want {wanted}"
        time.sleep(0.5)


def test_transfers_in_real_time_mode(cluster: Any, bootstrap: str) -> None:
    topic = cluster.topic("bank-transactions")
    assert len({partition_for(a.encode(), 3) for a in ACCOUNTS}) == 3  # from != to partition
    pipe = cluster.pipeline("bank", extra=["--realtime-batch-s", "3600"], wait=False)
    (port, _), = cluster.nodes(1, "bank")
    cluster.pipeline_ready(pipe)
    assert "mode=real-time" in pipe.log()

    ts = int(time.time() * 1000)
    records: list[Record] = [*GOOD[:3], *BAD, *GOOD[3:]]
    at = _produce(bootstrap, topic, records, ts)
    want = _want(records, at, ts)
    last = _rows(bootstrap, cluster.topic("balances-changelog"), want)
    rows, _ = changelog_state(list(last.values()))
    assert sum(r["balance"] for r in rows.values()) == sum(a for _, a, to in GOOD if not to)
    for account, m in last.items():  # both legs carry the record's position
        pos = dict(m.headers())[POSITION_HEADER].decode()
        assert pos == ",".join(f"{topic}:{p}:{o}" for p, o in sorted(want[account]["pos"].items()))

    letters = dead_letter_docs(bootstrap, cluster.topic(DEAD_LETTER_TOPIC), len(BAD), 120)
    bad_at = {at[records.index(r)]: reason for r, reason in BAD.items()}
    assert {(d["partition"], d["offset"]): d["reason"] for d in letters} == bad_at
    deadline = time.monotonic() + 30  # the listener counts after the batch's progress
    while metric(cluster.pipeline_metrics, "streamiq_pipeline_dead_letters_total") < len(BAD):
        assert time.monotonic() < deadline, "dead letters not counted"
        time.sleep(0.5)
    assert metric(cluster.pipeline_metrics, "streamiq_pipeline_dead_letters_total") == len(BAD)

    (p, o), = _produce(bootstrap, topic, [("alice", 7, "dave")], ts + 100)
    token = f"{topic}:{p}:{o}"
    assert p != partition_for(b"dave", 3)
    with httpx.Client(timeout=120, base_url=f"http://127.0.0.1:{port}") as c:
        r = c.get("/v1/views/balances/keys/dave", params={"position": token, "wait_ms": 60_000})
        assert r.status_code == 200, r.text
        assert r.json()["value"]["balance"] == want["dave"]["balance"] + 7  # the transfer's
        # and a scan with it: no marker comes, a tick does (pipeline/ticks.py): both legs
        r = c.get("/v1/views/balances/scan", params={"position": token, "wait_ms": 60_000})
        assert r.status_code == 200, r.text
        rows = {x["key"]: x["value"]["balance"] for x in r.json()["rows"]}
        assert rows["dave"] == want["dave"]["balance"] + 7, r.text
        assert rows["alice"] == want["alice"]["balance"] - 7, r.text
    assert pipe.alive(), pipe.log()[-4000:]


def test_a_checkpoint_from_before_transfers_resumes(bootstrap: str, tmp_path: Path) -> None:
    """The deposits-only plan (views_before_transfers) makes the checkpoint; the transfer
    plan starts on it (Spark refuses a changed state schema: the pipeline would not get
    ready) and folds transfers onto the balances the checkpoint holds."""
    suffix = uuid.uuid4().hex[:8]
    topic, changelog = f"bank-{suffix}", f"balances-{suffix}-changelog"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
    before = PipelineProcess(bootstrap, tmp_path / "ck", suffix, tmp_path / "before.log")
    before.cmd[before.cmd.index("views_for_tests")] = "views_before_transfers"
    _produce(bootstrap, topic, [(a, 100, None) for a in ACCOUNTS], 1)
    before.start(300)
    try:
        wait_caught_up(bootstrap, changelog, input_ends(bootstrap, topic), topic, 3)
        assert before.terminate() == 0, before.tail()
    finally:
        before.kill()
    after = PipelineProcess(bootstrap, tmp_path / "ck", suffix, tmp_path / "after.log").start(300)
    try:
        _produce(bootstrap, topic, [("alice", 30, "dave"), ("dave", 45, "carol")], 10)
        msgs = wait_caught_up(bootstrap, changelog, input_ends(bootstrap, topic), topic, 3)
        rows, _ = changelog_state(msgs)
        assert {k: (v["balance"], v["count"]) for k, v in rows.items()} == {
            "alice": (70, 2), "dave": (85, 3), "carol": (145, 2)}
        assert after.terminate() == 0, after.tail()
    finally:
        after.kill()
    assert "STATE_STORE" not in (tmp_path / "after.log").read_text()
