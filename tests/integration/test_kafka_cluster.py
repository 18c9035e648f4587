"""Every part on a 3-broker Apache Kafka cluster (replication factor 3,
``min.insync.replicas=2``), losing partition leaders while writes and queries stream.

The brokers run on their own loopback ports, each broker and controller at once (a
3-voter KRaft quorum). Ingest, the pipeline and three nodes use the cluster; the leader
of an input partition is SIGKILLed and started again, then the leader of a changelog
partition. Zero acknowledged writes are lost, every answer through the nodes is right
(the accounts read were written before the kills and do not change), and the views are
exact at the end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.admin import AdminClient
from procs import Deployment, free_port
from updemo import CONVERGE_S, Writer, balances_of, exact, until

from streamiq.kafka.broker import EmbeddedBroker, new_cluster_id
from streamiq.views import bank

pytestmark = pytest.mark.integration

#: a dead broker is fenced (its partitions led elsewhere) within 3 s, not Kafka's 9 s
FAST_FENCING = {"broker.session.timeout.ms": "3000", "broker.heartbeat.interval.ms": "500"}


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[dict[int, EmbeddedBroker]]:
    voters = {i: ("127.0.0.1", free_port()) for i in (1, 2, 3)}
    cid = new_cluster_id()
    out = {i: EmbeddedBroker("127.0.0.1", free_port(), tmp_path / f"kafka-{i}", node_id=i,
                             voters=voters, cluster_id=cid, config=FAST_FENCING)
           for i in voters}
    errors: list[BaseException] = []

    def start(b: EmbeddedBroker) -> None:
        try:
            b.start(timeout=120)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(b,)) for b in out.values()]
    for t in threads:  # together: a quorum of 3 elects a controller once 2 run
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        yield out
    finally:
        for b in out.values():
            b.stop(grace=10)


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return int(md.topics[topic].partitions[partition].leader)


class Traffic:
    """A writer (each POST a new account, amount 1) and readers asking every node for
    accounts that were written before and never change; every outcome counted."""

    def __init__(self, ingest: int, nodes: list[int], fixed: dict[str, int]) -> None:
        self.nodes, self.fixed = nodes, fixed
        self.writer = Writer(ingest, "w", pause=0.01)
        self.answers = 0
        self.wrong: list[Any] = []
        self.stop = threading.Event()
        self.threads = [self.writer, threading.Thread(target=self.read, daemon=True)]

    def read(self) -> None:
        accounts = sorted(self.fixed)
        with httpx.Client(timeout=30) as c:
            for i in range(200_000):  # bounded
                if self.stop.is_set():
                    return
                port = self.nodes[i % len(self.nodes)]
                account = accounts[i % len(accounts)]
                try:
                    r = c.get(f"http://127.0.0.1:{port}/account/{account}")
                    got = (r.status_code, r.json().get("value", {}).get("balance"))
                except (httpx.HTTPError, ValueError) as exc:
                    got = (0, repr(exc))
                self.answers += 1
                if got != (200, self.fixed[account]):
                    self.wrong.append((port, account, got))
                time.sleep(0.005)

    def __enter__(self) -> Traffic:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.writer.stop.set()
        for t in self.threads:
            t.join(90)


def _kill_and_restart(brokers: dict[int, EmbeddedBroker], victim: int,
                      traffic: Traffic) -> None:
    """SIGKILL a broker, let traffic flow without it, start it again on its log."""
    acked = len(traffic.writer.acked)
    brokers[victim].kill()
    until(lambda: len(traffic.writer.acked) >= acked + 30, 120, "writes acknowledged without it")
    brokers[victim].start(timeout=120)
    acked = len(traffic.writer.acked)
    until(lambda: len(traffic.writer.acked) >= acked + 30, 120, "writes acknowledged after it")


def test_leaders_of_an_input_and_a_changelog_partition_killed_under_traffic(
        brokers: dict[int, EmbeddedBroker], tmp_path: Path, procs: Any) -> None:
    bootstrap = ",".join(b.bootstrap_servers for b in brokers.values())
    cluster = Deployment(bootstrap, tmp_path, procs, free_port)
    pipe = cluster.pipeline("bank", wait=False)  # ready while the others start
    ingest, _ = cluster.ingest("bank")
    nodes = [port for port, _ in cluster.nodes(3, app="bank")]
    cluster.pipeline_ready(pipe)
    cluster.settle(nodes, "balances", timeout=120)
    fixed = {f"f-{i}": i + 1 for i in range(30)}
    with httpx.Client(base_url=f"http://127.0.0.1:{ingest}", timeout=30) as c:
        for account, amount in fixed.items():
            assert c.post(f"/account/{account}", params={"amount": amount}).status_code == 200
    for port in nodes:
        until(partial(exact, port, fixed), CONVERGE_S, "the fixed accounts")
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    replicas = {t: len(md.topics[t].partitions[0].replicas) for t in md.topics
                if t.startswith(cluster.prefix)}
    assert replicas and set(replicas.values()) == {3}, replicas

    with Traffic(ingest, nodes, fixed) as traffic:
        _kill_and_restart(brokers, _leader(bootstrap, cluster.topic(bank.TOPIC), 0), traffic)
        _kill_and_restart(brokers, _leader(bootstrap, cluster.topic(
            bank.BALANCES.changelog_topic), 1), traffic)
    assert traffic.answers > 100 and traffic.wrong == [], (traffic.answers, traffic.wrong[:10])
    assert len(traffic.writer.acked) > 100
    for port in nodes:  # no acknowledged write lost, none applied twice
        want = {**fixed, **dict.fromkeys(traffic.writer.acked, 1)}
        until(partial(exact, port, want), CONVERGE_S,
              "every acknowledged write visible exactly once")
        got = balances_of(port, traffic.writer.unacked)
        assert all(v in (None, 1) for v in got.values()), got
