"""Apache Kafka as the embedded broker: start time, memory, and restore compacted vs not.

1. Broker start: seconds from ``EmbeddedBroker.start()`` to answering metadata, on an
   empty folder (format + start) and on its own log again (restart), and the JVM's CPU
   by then; with and without the class-data archive ``streamiq broker --install`` makes
   (kafka/cds.py), interleaved, ``--starts`` each; the broker's resident memory once
   started (its heap is bounded by ``-Xmx``).
2. Restore from empty, compacted vs not, in one run: ``--keys`` accounts updated
   ``--rounds`` times each, produced straight to two 3-partition changelogs, one
   compacted (the cleaner let run) and one not (``cleanup.policy=delete``). A node with
   an empty store restores each; seconds to ``/health`` 200 and the records it read
   (``streamiq_changelog_records_read_total``), side by side, and per million keys.

    python bench/bench_kafka.py [--keys 100000] [--rounds 10] [--starts 3]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from _common import NodeProc, bench_broker, free_port, wait_ready
from bench_queries import rows  # also puts tests/ on sys.path
from bench_sizing import rss_mb
from changelog import produce_rows
from confluent_kafka import Producer

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.broker import DEFAULT_HEAP_MB, EmbeddedBroker
from streamiq.kafka.cds import archive
from streamiq.views.bank import BALANCES
from streamiq.views.base import MARKER_HEADER, MARKER_KEY, marker_value

#: the compacted changelog's settings: streamiq's, plus segments that roll soon so the
#: cleaner can run within the bench (Kafka never cleans the active segment)
COMPACTED = {"cleanup.policy": "compact", "segment.ms": "1000",
             "min.cleanable.dirty.ratio": "0.01", "max.compaction.lag.ms": "1000"}
PLAIN = {"cleanup.policy": "delete", "retention.ms": "-1"}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_once(use_archive: bool) -> tuple[float, float, float, float]:
    """A fresh start and a restart, with or without the class-data archive (kafka/cds.py):
    seconds to answering metadata of each, the JVM's CPU by the restart's, its memory."""
    from streamiq.kafka import broker as module

    flags = module.archive_flags
    if not use_archive:
        module.archive_flags = lambda libs=None: []  # type: ignore[misc]
    try:
        b = bench_broker()
        t0 = time.monotonic()
        b.start()
        fresh = time.monotonic() - t0
        b.stop()
        t0 = time.monotonic()
        b.start()
        again = time.monotonic() - t0
        assert b.proc is not None
        cpu = _cpu_s(b.proc.pid)
        time.sleep(2)
        rss = rss_mb(b.proc.pid)
        b.stop()
    finally:
        module.archive_flags = flags  # type: ignore[misc]
    return fresh, again, cpu, rss


def _series(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.1f} s ({', '.join(f'{x:.1f}' for x in xs)})"


def _count(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-count",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in range(3)])
    n = eof = 0
    while eof < 3:
        msgs = c.consume(10_000, 10)
        if not msgs:
            raise RuntimeError(f"{topic}: no end in 10 s")
        for m in msgs:
            if m.error():
                eof += 1
            else:
                n += 1
    c.close()
    return n


def fill(broker: EmbeddedBroker, prefix: str, config: dict[str, str], keys: int,
         rounds: int) -> str:
    bs = broker.bootstrap_servers
    topic = prefix + BALANCES.changelog_topic
    ensure_topics({"bootstrap.servers": bs}, {topic: 3}, config=config)
    data = rows(keys)
    for r in range(rounds):
        produce_rows(bs, topic, BALANCES, [{**row, "count": r + 1} for row in data])
    time.sleep(1.2)  # past segment.ms: the marker below rolls every partition's segment
    p = Producer({"bootstrap.servers": bs})
    for part in range(3):  # as the pipeline does after each micro-batch
        p.produce(topic, key=MARKER_KEY, value=marker_value(0, {}), partition=part,
                  headers=[(MARKER_HEADER, b"1")])
    p.flush(30)
    return topic


def restore(bs: str, prefix: str, root: Path) -> tuple[float, int]:
    port = free_port()
    t0 = time.monotonic()
    node = NodeProc(port, ["--bootstrap-servers", bs, "--cluster", prefix, "--topic-prefix",
                           prefix, "--app", "bank", "--state-dir", str(root / prefix),
                           "--standby-replicas", "0", "--no-auth", "--log-level", "warning"],
                    root / f"{prefix}.log")
    try:
        wait_ready(port, 1800)
        took = time.monotonic() - t0
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        read = sum(int(float(v)) for v in re.findall(
            r"^streamiq_changelog_records_read_total\{[^}]*\} (\S+)$", text, re.MULTILINE))
        return took, read
    finally:
        node.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--starts", type=int, default=3)
    a = ap.parse_args()
    print(f"broker start (Apache Kafka, KRaft, one node; {a.starts} each, interleaved):")
    if not archive().is_file():
        print(f"  (no class-data archive at {archive()}: streamiq broker --install makes it)")
    runs: dict[bool, list[tuple[float, float, float, float]]] = {False: [], True: []}
    for _ in range(a.starts):
        for use in (False, True):
            runs[use].append(start_once(use))
    for use, got in runs.items():
        fresh, again, cpu, rss = (list(x) for x in zip(*got, strict=True))
        print(f"  {'with' if use else 'without'} the class-data archive:")
        print(f"    on an empty folder (format + start): {_series(fresh)}")
        print(f"    on its own log again: {_series(again)}; JVM CPU by then {_series(cpu)}")
        print(f"    resident memory once started: {max(rss):.0f} MB (heap -Xmx"
              f"{DEFAULT_HEAP_MB}m)")
    root = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    broker = bench_broker().start()
    try:
        bs = broker.bootstrap_servers
        compacted = fill(broker, "cmp-", COMPACTED, a.keys, a.rounds)
        plain = fill(broker, "all-", PLAIN, a.keys, a.rounds)
        deadline = time.monotonic() + 600
        while (n := _count(bs, compacted)) > a.keys * 1.05 and time.monotonic() < deadline:
            time.sleep(2)
        print(f"\n{a.keys:,} keys x {a.rounds} updates ({a.keys * a.rounds:,} rows) per "
              f"changelog; after the cleaner: {n:,} records compacted, "
              f"{_count(bs, plain):,} not")
        m = a.keys / 1e6
        results = {}
        for name, prefix in (("compacted", "cmp-"), ("not compacted", "all-")):
            took, read = restore(bs, prefix, root)
            results[name] = took
            print(f"  restore from empty, {name}: {took:.1f} s, {read:,} records read "
                  f"({took / m:.1f} s and {read / m / 1e6:.1f}M records per million keys)")
        print(f"  ratio not compacted / compacted: "
              f"{results['not compacted'] / results['compacted']:.2f}x")
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
