"""A subscription on a node that holds none of the key's replicas (issue 40, any node):
three real nodes on Apache Kafka, the entry merging the owner's stream over the peer
protocol. The owner is SIGKILLed, then the next one SIGSTOPped, while a writer streams
changes: the client's one connection sees every change once, in order, and ends at the
exact value.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from procs import HTTP
from sse import Sse, SseEvent
from updemo import until

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

P = 3
KEY = "watched"


def _writer(bootstrap: str, topic: str, values: range, pause: float) -> threading.Thread:
    def run() -> None:
        p = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                      "linger.ms": 0})
        for v in values:
            p.produce(topic, key=KEY.encode(), value=json.dumps(
                {"account": KEY, "balance": v, "count": v, "last_update": 0}))
            p.poll(0)
            time.sleep(pause)
        assert p.flush(30) == 0

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _until_balance(s: Sse, last: int) -> list[SseEvent]:
    out: list[SseEvent] = []
    while True:
        e = s.event()
        assert e.event is None, e
        out.append(e)
        if e.data["value"]["balance"] == last:
            return out


def _feeding(candidates: list[str]) -> str:
    """The one of ``candidates`` whose store feeds a subscription: the replica the
    entry streams from (its router's choice, not always the active one)."""
    def feeds(address: str) -> float:
        text = HTTP.get(f"http://{address}/metrics", timeout=10).text
        m = re.search(r"^streamiq_subscription_feeds (\S+)$", text, re.MULTILINE)
        return float(m[1]) if m else 0.0

    found: list[str] = []

    def look() -> bool:
        found[:] = [a for a in candidates if feeds(a) > 0]
        return bool(found)

    until(look, 30, f"one of {candidates} feeding the stream")
    return found[0]


def _applied(addresses: list[str], partition: int, offset: int) -> bool:
    """Every one of ``addresses`` that holds ``partition`` of balances has applied its
    changelog up to ``offset``, and one at least holds it."""
    pattern = re.compile(rf'^streamiq_changelog_offset\{{partition="{partition}",'
                         rf'view="balances"\}} (\S+)$', re.MULTILINE)
    held = [float(m[1]) for a in addresses
            if (m := pattern.search(HTTP.get(f"http://{a}/metrics", timeout=10).text))]
    return bool(held) and min(held) >= offset


def test_any_node_streams_a_key_through_a_kill_and_a_hang_of_its_owners(
        cluster: Any) -> None:
    topic = cluster.topic(BALANCES.changelog_topic)
    ensure_topics({"bootstrap.servers": cluster.bootstrap}, {topic: P})
    nodes = cluster.nodes(3, extra=["--partitions", str(P), "--changes-keepalive-s", "1"])
    ports = [port for port, _ in nodes]
    procs = {f"127.0.0.1:{port}": proc for port, proc in nodes}
    cluster.settle(ports, "balances")
    _writer(cluster.bootstrap, topic, range(1, 2), 0).join()
    meta = HTTP.get(f"http://127.0.0.1:{ports[0]}/v1/metadata/balances/{KEY}").json()
    owners = [meta["active"], *meta["standbys"]]
    entry = next(a for a in procs if a not in owners)
    until(lambda: HTTP.get(f"http://{entry}/account/{KEY}").status_code == 200, 30,
          "the key stored")
    stopped: list[int] = []
    try:
        with Sse(f"http://{entry}/v1/views/balances/changes", params={"key": KEY}) as s:
            first = s.event()
            assert first.data["value"]["balance"] == 1 and s.event().event == "ready"
            w = _writer(cluster.bootstrap, topic, range(2, 61), 0.02)
            procs[_feeding(owners)].kill()  # the owner: gone at once, mid-stream
            got = _until_balance(s, 60)
            w.join()
            # the next owner hangs (not the entry itself, whose stream is local)
            alive = [a for a in procs if a != entry and procs[a].alive()]
            serving = _feeding(alive)  # where the entry resumed
            os.kill(procs[serving].pid, signal.SIGSTOP)
            stopped.append(procs[serving].pid)
            w = _writer(cluster.bootstrap, topic, range(61, 101), 0.02)
            got += _until_balance(s, 100)
            w.join()
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
    # a resume by Last-Event-ID on another node continues exactly after it
    other = next(a for a, proc in procs.items() if a != entry and proc.alive())
    _writer(cluster.bootstrap, topic, range(101, 106), 0).join()
    # ``ready`` stands for where the serving store stood when the stream registered:
    # once the replicas hold the five new changes, the resume must replay all of them
    # before it (a store still behind them says ``ready`` first and sends them after)
    live = [a for a, proc in procs.items() if proc.alive()]
    until(lambda: _applied(live, meta["partition"], 105), 30, "the new changes applied")
    with Sse(f"http://{other}/v1/views/balances/changes", params={"key": KEY},
             headers={"last-event-id": got[-1].id or ""}) as s:
        resumed = _until_balance(s, 105)
    assert [e.data["value"]["balance"] for e in resumed] == list(range(101, 106))
    log = procs[entry].log()  # the entry resumed on another replica after each
    assert "ConnectionResetError" in log and "TimeoutError" in log and \
        log.count("resume elsewhere") >= 2
    balances = [e.data["value"]["balance"] for e in got]
    assert balances == list(range(2, 101))  # every change once, in order: no gap, no dup
    offsets = [e.data["offset"] for e in got]
    assert offsets == sorted(set(offsets))
    assert all(e.id is not None for e in got)
