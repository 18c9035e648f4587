"""Apache Kafka under streamiq: a demo that survives a broker SIGKILL and a Ctrl-C, and
compacted changelogs that keep a node's restore to about one record per key.

One two-node ``streamiq up`` (its embedded broker's log in a temporary folder) is shared
in file order: the broker is SIGKILLed under writes (``up`` restarts it; the other parts
reconnect by themselves and no acknowledged write is lost), then the whole demo gets
SIGTERM and is started again on the same folders (every view is served where it was,
and the nodes resume from their checkpoints instead of reading the changelogs again).
"""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from changelog import produce_rows
from confluent_kafka import Consumer, Producer
from procs import free_port
from updemo import CONVERGE_S, HEADERS, Up, Writer, balances_of, exact, until

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES
from streamiq.views.base import MARKER_HEADER, MARKER_KEY, marker_value

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    u = Up(tmp_path_factory.mktemp("kafka-demo"), nodes=2)
    try:
        u.start()
        yield u
    finally:
        u.kill_everything()


def _metric(port: int, name: str) -> float:
    """Sum of a node's metric over its labels."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=HEADERS, timeout=10).text
    return sum(float(m.group(1)) for m in
               re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE))


def _broker_pid(up: Up) -> int:
    (pid,) = [p for p, argv in up.tree().items() if "kafka.Kafka" in argv]
    return pid


def test_broker_sigkill_under_writes_is_restarted_and_loses_nothing(demo: Up) -> None:
    writer = Writer(demo.ingest_port, f"k{uuid.uuid4().hex[:4]}", HEADERS)
    writer.start()
    try:
        until(lambda: len(writer.acked) >= 20, 60, "writes acknowledged before the kill")
        offset = len(demo.log())
        old = _broker_pid(demo)
        os.kill(old, signal.SIGKILL)
        demo.wait_for(r"^streamiq: the embedded broker exited at .* \(killed by SIGKILL\); "
                      r"restarting it on its log$", 30, offset)
        demo.wait_for(r"^streamiq: embedded broker ready again on ", 120, offset)
        assert _broker_pid(demo) != old
        before = len(writer.acked)
        until(lambda: len(writer.acked) >= before + 20, 120, "writes acknowledged after it")
    finally:
        writer.stop.set()
        writer.join(60)
    # nodes, ingest and the pipeline reconnected by themselves: none was restarted
    assert "restarting in" not in demo.log()[offset:], demo.tail()
    for port in demo.node_ports:
        until(lambda port=port: exact(port, dict.fromkeys(writer.acked, 1)), CONVERGE_S,
              "every acknowledged write visible exactly once")
        got = balances_of(port, writer.unacked)
        assert all(v in (None, 1) for v in got.values()), got  # never twice


def test_a_second_up_resumes_every_view_without_reading_the_changelogs_again(
        demo: Up) -> None:
    want: Counter[str] = Counter()
    general = _general_orders(demo.node_port)
    with httpx.Client(headers=HEADERS, base_url=f"http://127.0.0.1:{demo.ingest_port}",
                      timeout=30) as c:
        for i in range(300):  # each a key of its own: at least 300 changelog rows
            account = f"d-{i}"
            assert c.post(f"/account/{account}", params={"amount": i}).status_code == 200
            want[account] += i
        for i in range(30):
            order = {"order_id": f"o-{i}", "store": f"s-{i % 3}", "type": "GENERAL",
                     "amount": 1}
            assert c.post("/orders", json=order).status_code == 200
    until(lambda: _general_orders(demo.node_port) == general + 30, CONVERGE_S, "orders visible")
    for port in demo.node_ports:
        until(lambda port=port: exact(port, dict(want)), CONVERGE_S, "balances visible")
    offsets = {port: _metric(port, "streamiq_changelog_offset") for port in demo.node_ports}
    assert all(n >= 300 for n in offsets.values()), offsets

    os.killpg(demo.pid, signal.SIGTERM)  # Ctrl-C in a terminal
    assert demo.proc is not None and demo.proc.wait(120) == 0, demo.tail()
    demo.start()  # same folders, same ports: make demo again

    for port in demo.node_ports:
        assert exact(port, dict(want)) is True  # served at once, nothing missing
        assert _general_orders(port) == general + 30
        read = _metric(port, "streamiq_changelog_records_read_total")
        # resumed from the checkpoints: a few markers at most, not the changelogs again
        assert read * 10 < offsets[port], (port, read, offsets[port])
    resumed = re.findall(r"resuming from changelog offset (\d+)", demo.log())
    assert resumed and any(int(o) > 0 for o in resumed)


def _general_orders(port: int) -> int:
    r = httpx.get(f"http://127.0.0.1:{port}/v1/views/order_counts/aggregate",
                  params={"group_by": "type", "agg": "sum(count)"}, headers=HEADERS, timeout=30)
    assert r.status_code == 200, r.text
    return int({g["type"]: g["sum(count)"] for g in r.json()["groups"]}.get("GENERAL", 0))


#: a changelog Kafka compacts at once: segments rolled after 200 ms, cleaned when 1% of
#: the log is dirty (the topic's own settings; the embedded broker's cleaner wakes every s)
EAGER_COMPACTION = {"cleanup.policy": "compact", "segment.ms": "200",
                    "min.cleanable.dirty.ratio": "0.01", "max.compaction.lag.ms": "200"}


def _count(bootstrap: str, topic: str, partitions: int) -> int:
    from confluent_kafka import TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4().hex}",
                  "enable.partition.eof": True, "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    n, eof = 0, 0
    try:
        while eof < partitions:
            m = c.poll(10)
            if m is None:
                raise AssertionError(f"{topic}: no end of partition in 10 s")
            if m.error():
                eof += m.error().code() == -191  # _PARTITION_EOF
            else:
                n += 1
    finally:
        c.close()
    return n


def test_a_node_restoring_from_empty_reads_about_one_record_per_key(
        bootstrap: str, tmp_path: Path, procs: Any) -> None:
    keys, rounds = 300, 20
    prefix = f"cmp{uuid.uuid4().hex[:6]}-"
    topic = prefix + BALANCES.changelog_topic
    ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3}, config=EAGER_COMPACTION)
    for r in range(rounds):
        produce_rows(bootstrap, topic, BALANCES,
                     [{"account": f"c{i}", "balance": r * 1000 + i, "count": r + 1,
                       "last_update": 0} for i in range(keys)])
    final = {f"c{i}": (rounds - 1) * 1000 + i for i in range(keys)}

    # as the pipeline does after each micro-batch: a marker per partition, whose append
    # after segment.ms rolls each partition's segment, so every row becomes cleanable
    time.sleep(0.5)
    p = Producer({"bootstrap.servers": bootstrap})
    for part in range(3):
        p.produce(topic, key=MARKER_KEY, value=marker_value(0, {}), partition=part,
                  headers=[(MARKER_HEADER, b"1")])
    assert p.flush(30) == 0

    def compacted() -> bool | str:
        n = _count(bootstrap, topic, 3)
        return n <= keys * 1.2 or f"{n} records"

    until(compacted, 180, "the changelog compacted")
    port = free_port()
    node = procs("node", ["--bootstrap-servers", bootstrap, "--cluster", prefix,
                          "--topic-prefix", prefix, "--app", "bank", "--port", str(port),
                          "--state-dir", str(tmp_path / "state"), "--standby-replicas", "0",
                          "--no-auth"])
    node.wait_ready(f"http://127.0.0.1:{port}/health", timeout=120)
    assert exact(port, final) is True
    read = _metric(port, "streamiq_changelog_records_read_total")
    # about one record per key (plus what the active segments still hold), where the
    # changelog received keys * rounds updates
    assert keys <= read <= keys * 1.2, (read, keys * rounds)
