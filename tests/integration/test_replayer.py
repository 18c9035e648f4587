"""A partition replayed from its changelog by a process of its own (issue 49,
``serving/changelog/replayer.py``) on the session's broker: the snapshot it makes is
what the node's own replay would hold (rows, tombstones, the checkpoint at the end,
every bad record skipped and counted), and a child that cannot replay, or is stopped,
ends with ``ReplayFailed`` and leaves no process behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.partitioner import partition_for
from streamiq.serving.changelog.partition import Replaying
from streamiq.serving.changelog.replayer import ReplayFailed, ReplayJob, replay, view_fields
from streamiq.state import open_store
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

P = 2
ACCOUNTS = 3000


def _row(account: str, balance: int) -> bytes:
    return json.dumps({"account": account, "balance": balance, "count": 1,
                       "last_update": 0}).encode()


def _changelog(bootstrap: str, topic: str) -> dict[int, dict[str, int | None]]:
    """Three rounds of rows, a tombstone per 100 accounts, one record that is not JSON
    in each partition: what each partition's store must hold after (None: deleted)."""
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: P})
    # idempotent: a batch retried (the topic's leader not known yet) keeps its order
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    want: dict[int, dict[str, int | None]] = {q: {} for q in range(P)}
    for r in range(3):
        for i in range(ACCOUNTS):
            account = f"r{i}"
            q = partition_for(account, P)
            if r == 2 and i % 100 == 0:
                p.produce(topic, key=account.encode(), value=None, partition=q)
                want[q][account] = None
            else:
                p.produce(topic, key=account.encode(), value=_row(account, r * i), partition=q)
                want[q][account] = r * i
            p.poll(0)
    for q in range(P):  # a key of the partition (else skipped as wrong_partition first)
        bad = next(a for a in (f"bad{n}" for n in range(100)) if partition_for(a, P) == q)
        p.produce(topic, key=bad.encode(), value=b"{not json", partition=q)
    assert p.flush(30) == 0
    return want


def _job(bootstrap: str, topic: str, tmp: Path, q: int, end: int, store: str = "rocksdb"
         ) -> ReplayJob:
    return ReplayJob(kafka={"bootstrap.servers": bootstrap}, topic=topic, partition=q,
                     partitions=P, view=view_fields(BALANCES), end=end, store=store,
                     memory_mb=64, scratch=str(tmp / f"scratch-{q}"),
                     into=str(tmp / f"snap-{q}"))


def _end(bootstrap: str, topic: str, q: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, q), timeout=10)[1])
    finally:
        c.close()


@pytest.mark.parametrize("kind", ["rocksdb", "memory"])
def test_a_replayed_partition_holds_what_its_changelog_says(
        bootstrap: str, tmp_path: Path, kind: str) -> None:
    topic = f"replay-{kind}-{tmp_path.name}"
    want = _changelog(bootstrap, topic)
    store = open_store(kind, tmp_path / "node", 64)  # type: ignore[arg-type]
    for q in range(P):
        end = _end(bootstrap, topic, q)
        progress = Replaying(end)
        snap, skips, read = replay(_job(bootstrap, topic, tmp_path, q, end, kind), progress,
                                   lambda: False)
        assert (snap.partition, snap.checkpoint.offset, read) == (q, end, end)
        assert skips == {"not_json": 1}  # the bad record skipped and counted, not fatal
        cp = store.ingest(snap)  # checked as a peer's copy is
        assert cp.offset == end
        held = {k.decode(): json.loads(v)["balance"] for k, v in store.scan(q)}
        assert held == {a: b for a, b in want[q].items() if b is not None}
        assert not Path(snap.path).exists()  # taken in
    assert not list((tmp_path).glob("scratch-*/store"))  # the child's store removed
    store.close()


def test_a_replayer_that_cannot_replay_fails_with_its_reason(bootstrap: str,
                                                            tmp_path: Path) -> None:
    topic = f"replay-bad-{tmp_path.name}"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: P})
    with pytest.raises(ReplayFailed, match="unknown store 'nope'"):
        replay(_job(bootstrap, topic, tmp_path, 0, 10, store="nope"), Replaying(10),
               lambda: False)


def test_a_replay_stops_with_the_node(bootstrap: str, tmp_path: Path) -> None:
    topic = f"replay-stop-{tmp_path.name}"
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: P})
    asked: list[Any] = []

    def stopped() -> bool:  # asked at each progress line: the node stops at the first
        asked.append(1)
        return True

    # an end the changelog never reaches: only the stop ends it
    with pytest.raises(ReplayFailed, match="the node stops"):
        replay(_job(bootstrap, topic, tmp_path, 0, 10**6), Replaying(10**6), stopped)
    assert asked
