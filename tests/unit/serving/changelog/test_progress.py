"""The pipeline's progress: published at most every few seconds per view, followed by
the nodes (newest per view; garbage skipped and counted)."""

from __future__ import annotations

import json
from typing import Any

from streamiq.pipeline.progress import PERIOD_S, ProgressPublisher
from streamiq.serving.changelog.progress import Progress
from streamiq.supervise import Supervisor


class _FakeProducer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    def produce(self, topic: str, key: bytes, value: bytes) -> None:
        self.sent.append((topic, key, value))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        return 0


def test_publishing_is_throttled_per_view_unless_forced(monkeypatch: Any) -> None:
    clock = [100.0]
    monkeypatch.setattr("streamiq.pipeline.progress.time.monotonic", lambda: clock[0])
    pub = ProgressPublisher({}, "_streamiq-c-progress")
    pub._producer = fake = _FakeProducer()
    assert pub.publish("balances", {"batches": 1})
    assert not pub.publish("balances", {"batches": 2})  # too soon
    assert pub.publish("orders", {"batches": 1})  # another view has its own period
    assert pub.publish("balances", {"batches": 3, "dead_letters": 1}, force=True)
    clock[0] += PERIOD_S
    assert pub.publish("balances", {"batches": 4})
    docs = [json.loads(v) for _, _, v in fake.sent]
    assert [(d["view"], d["batches"]) for d in docs] == [
        ("balances", 1), ("orders", 1), ("balances", 3), ("balances", 4)]
    assert all(t == "_streamiq-c-progress" and k == d["view"].encode()
               for (t, k, _), d in zip(fake.sent, docs, strict=True))


def test_a_held_back_progress_is_sent_when_its_period_ends(monkeypatch: Any) -> None:
    clock = [100.0]
    monkeypatch.setattr("streamiq.pipeline.progress.time.monotonic", lambda: clock[0])
    timers: list[tuple[float, Any]] = []
    pub = ProgressPublisher({}, "t", later=lambda delay, run: timers.append((delay, run)))
    pub._producer = fake = _FakeProducer()
    assert pub.publish("balances", {"batches": 1})
    clock[0] += 1
    assert not pub.publish("balances", {"batches": 2})
    assert not pub.publish("balances", {"batches": 3})  # replaces 2; no second timer
    assert [d for d, _ in timers] == [PERIOD_S - 1]
    clock[0] += PERIOD_S - 1
    timers.pop()[1]()  # the pipeline went quiet: its last batch still goes out
    timers.clear()
    assert [json.loads(v)["batches"] for _, _, v in fake.sent] == [1, 3]
    assert not pub.publish("balances", {"batches": 4})  # a new period from that send
    assert pub.publish("orders", {"batches": 1})
    pub.close()  # what is held goes out on close; a timer firing later sends nothing
    for _, run in timers:
        run()
    assert [(json.loads(v)["view"], json.loads(v)["batches"]) for _, _, v in fake.sent] == [
        ("balances", 1), ("balances", 3), ("orders", 1), ("balances", 4)]


def test_the_follower_keeps_the_newest_per_view_and_skips_garbage() -> None:
    p = Progress({}, "t", Supervisor())
    p.receive(json.dumps({"view": "balances", "batches": 1}).encode())
    p.receive(json.dumps({"view": "balances", "batches": 2}).encode())
    for bad in (None, b"not json", b"[1]", b'{"view": 3}', b"[" * 5000,
                json.dumps({"view": "x", "pad": "y" * 5000}).encode()):
        p.receive(bad)
    assert p.snapshot() == {"balances": {"view": "balances", "batches": 2}}
    assert p.skipped == 6


def test_skipped_progress_records_are_counted_per_reason() -> None:
    p = Progress({}, "t", Supervisor())
    for bad in (None, b"[" * 4000, b"\xff", b"[1]", b'{"view": "../x"}',
                json.dumps({"view": "x", "pad": "y" * 5000}).encode()):
        p.receive(bad)
    assert p.skips.reasons == {"not_json": 3, "not_object": 1, "bad_view": 1, "too_large": 1}
    for i in range(1100):  # a flood of view names does not grow what is kept
        p.receive(json.dumps({"view": f"v{i}"}).encode())
    assert len(p.snapshot()) == 1024 and p.skips.reasons["too_many_views"] == 76
