"""What ``streamiq install`` (and ``streamiq broker --install``) does for the broker:
Apache Kafka's jars, resolved by Ivy (kafka/jars.py), then the broker's class-data
archive (kafka/cds.py), written by one short broker run that creates a compacted topic,
produces with an idempotent producer and consumes in a group: the classes a broker
works with.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.broker import BrokerError, EmbeddedBroker, free_port
from streamiq.kafka.cds import archive, current
from streamiq.kafka.jars import install_jars, kafka_libs

__all__ = ["install", "make_archive"]


def install() -> tuple[Path, Path | None]:
    """The jars (JarsError when they cannot be resolved), then the archive (None when it
    could not be made: brokers then start without one, only slower)."""
    libs = install_jars()
    return libs, make_archive(libs)


def _traffic(bootstrap: str) -> None:
    """What loads a broker's working classes (its clients quiet: the broker stops under
    them)."""
    conf = {"bootstrap.servers": bootstrap, "log_level": 0}
    ensure_topics(conf, {"cds": 2}, config={"cleanup.policy": "compact"})
    producer = Producer({**conf, "enable.idempotence": True, "acks": "all"})
    for i in range(500):
        producer.produce("cds", key=str(i % 50), value=b"v" * 64)
    producer.flush(30)
    consumer = Consumer({**conf, "group.id": "cds", "auto.offset.reset": "earliest"})
    consumer.subscribe(["cds"])
    seen = 0
    for _ in range(40):
        seen += sum(1 for m in consumer.consume(100, 0.5) if not m.error())
        if seen >= 500:
            break
    consumer.close()


def make_archive(libs: Path | None = None) -> Path | None:
    """Make the archive unless a current one is there (one broker run, ~10 s); its path,
    or None when it could not be made (the broker then starts without one)."""
    libs = libs or kafka_libs()
    jsa = archive(libs)
    if current(libs):
        return jsa
    part = jsa.with_suffix(".part")
    part.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="streamiq-cds-") as tmp:
        broker = EmbeddedBroker("127.0.0.1", free_port("127.0.0.1"), tmp, archiving_to=part)
        try:
            _traffic(broker.start().bootstrap_servers)
        except (BrokerError, KafkaException, RuntimeError, OSError):
            pass  # the archive is an optimisation: without it, starts are only slower
        finally:
            broker.stop()  # a controlled exit: the JVM writes the archive as it exits
    if not part.is_file():
        return None
    part.rename(jsa)
    return jsa
