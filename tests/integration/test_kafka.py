"""Compacted changelogs on Apache Kafka: a node restoring from empty reads about one
record per key, however often each key was updated. (The broker's restarts under
``streamiq up``: tests/integration/test_up.py; several brokers: test_kafka_cluster.py.)
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from changelog import produce_rows
from confluent_kafka import Consumer, Producer
from procs import free_port
from updemo import exact, metric, until

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES
from streamiq.views.base import MARKER_HEADER, MARKER_KEY, marker_value

pytestmark = pytest.mark.integration


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
            err = m.error()
            if err is not None:
                eof += err.code() == -191  # _PARTITION_EOF
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
    read = metric(port, "streamiq_changelog_records_read_total")
    # about one record per key (plus what the active segments still hold), where the
    # changelog received keys * rounds updates
    assert keys <= read <= keys * 1.2, (read, keys * rounds)


def test_the_session_broker_maps_the_class_data_archive_install_made(broker: Any) -> None:
    """``make install`` (``streamiq broker --install``) makes the broker's archive
    (kafka/cds.py); a broker started after maps it (its classes are not loaded again)."""
    from streamiq.kafka.cds import archive

    jsa = archive()
    assert jsa.is_file(), f"no class-data archive at {jsa}: streamiq broker --install"
    maps = Path(f"/proc/{broker.proc.pid}/maps").read_text()
    assert str(jsa) in maps
