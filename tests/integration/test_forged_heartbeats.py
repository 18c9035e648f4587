"""A forged heartbeat does not join a cluster that has a secret: no partition moves to
it, no node connects to the address it names, and answers stay right."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import httpx
import pytest
from changelog import produce_rows
from topicjunk import health, members, reasons, until

from streamiq.kafka.admin import ensure_topics
from streamiq.routing.epochs import EpochTopics
from streamiq.routing.membership import SIGNATURE_HEADER, members_topic, sign
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration


class Listener:
    """A TCP port that counts the connections made to it (it must see none)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


def test_forged_heartbeats_claim_nothing_and_draw_no_connection(cluster: Any) -> None:
    from confluent_kafka import Producer

    ensure_topics({"bootstrap.servers": cluster.bootstrap},
                  {cluster.topic(BALANCES.changelog_topic): 3})
    rows = [{"account": f"a{i}", "balance": i, "count": 1, "last_update": 0} for i in range(30)]
    produce_rows(cluster.bootstrap, cluster.topic(BALANCES.changelog_topic), BALANCES, rows)
    ports = [p for p, _ in cluster.nodes(3, "bank")]
    listener = Listener()
    claim = {"endpoint": listener.address, "incarnation": "evil", "started_at": 0.0,
             "partitions": {"balances": {str(p): {"offset": 10**9, "lag": 0, "restored": 1}
                                         for p in range(3)}}}
    forged = json.dumps(claim).encode()
    topics = EpochTopics(cluster.topic(members_topic(cluster.name)), 60.0)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    stop = threading.Event()

    def forge() -> None:  # unsigned, signed with a guess, and plain garbage, all the time
        while not stop.is_set():
            topic = topics.publish(time.time())
            producer.produce(topic, value=forged)
            producer.produce(topic, value=forged,
                             headers=[(SIGNATURE_HEADER, sign(b"guess", forged))])
            producer.produce(topic, value=b"\x00not json")
            producer.poll(0)
            time.sleep(0.05)
        producer.flush(10)

    forger = threading.Thread(target=forge, daemon=True)
    forger.start()
    try:
        # every node has read whole rounds of the forgeries (each is refused as unsigned:
        # no valid signature) before the checks: a refused record changes nothing later
        until(lambda: all(reasons(p, "membership").get("unsigned", 0) >= 6 for p in ports),
              "every node to refuse two rounds of forged heartbeats", 60,
              show=lambda: {p: reasons(p, "membership") for p in ports})
        with httpx.Client(timeout=10) as c:
            for port in ports:
                for row in rows:
                    r = c.get(f"http://127.0.0.1:{port}/v1/views/balances/keys/{row['account']}")
                    assert r.status_code == 200 and r.json()["value"] == row, r.text
                    assert r.json()["served_by"] != listener.address
                members = {n["endpoint"] for n in
                           c.get(f"http://127.0.0.1:{port}/v1/cluster").json()["nodes"]}
                assert members == {f"127.0.0.1:{p}" for p in ports}
                skipped = c.get(f"http://127.0.0.1:{port}/health").json()["skipped_records"]
                assert skipped["membership"] > 0
    finally:
        stop.set()
        forger.join(10)
        listener.close()
    assert listener.connections == 0


def _capture(bootstrap: str, topic: str, endpoint: str) -> tuple[bytes, list[Any]]:
    """A heartbeat ``endpoint`` signed and sent (not its goodbye), read off ``topic``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "capture",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                value = m.value()
                if (not m.error() and m.key() == endpoint.encode() and value is not None
                        and not json.loads(value)["leaving"]):
                    return value, list(m.headers() or [])
    finally:
        c.close()
    raise AssertionError(f"no heartbeat of {endpoint} on {topic}")


def test_a_replayed_heartbeat_does_not_bring_a_dead_node_back(cluster: Any) -> None:
    """A real node's signed heartbeat, captured off the members topic and produced again
    after the node was killed, is refused and counted: the dead node stays out of
    routing (today the replay makes it a member again, and queries go to it)."""
    from confluent_kafka import Producer

    ensure_topics({"bootstrap.servers": cluster.bootstrap},
                  {cluster.topic(BALANCES.changelog_topic): 3})
    nodes = cluster.nodes(3, "bank")
    ports = [p for p, _ in nodes]
    endpoints = sorted(f"127.0.0.1:{p}" for p in ports)
    until(lambda: all(members(p) == endpoints for p in ports), "3 members seen by all")
    (dead_port, dead), survivors = nodes[0], ports[1:]
    topics = EpochTopics(cluster.topic(members_topic(cluster.name)), 60.0)
    value, headers = _capture(cluster.bootstrap, topics.publish(time.time()),
                              f"127.0.0.1:{dead_port}")
    dead.kill()  # SIGKILL: no goodbye
    gone = sorted(f"127.0.0.1:{p}" for p in survivors)
    until(lambda: all(members(p) == gone for p in survivors), "the killed node dropped")
    before = {p: reasons(p, "membership").get("replayed", 0) for p in survivors}
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    producer.produce(topics.publish(time.time()), key=f"127.0.0.1:{dead_port}".encode(),
                     value=value, headers=headers)
    assert producer.flush(10) == 0
    until(lambda: all(reasons(p, "membership").get("replayed", 0) > before[p]
                      for p in survivors), "the replay refused by every survivor",
          show=lambda: [health(p)["skip_reasons"] for p in survivors])
    for p in survivors:  # heard and refused: it made no member
        assert members(p) == gone, p
