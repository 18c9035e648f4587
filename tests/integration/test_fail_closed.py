"""A node fails closed (issue 13), through real node processes and a real broker.

* junk on the members topic (not JSON, binary, oversized, wrong types) is skipped and
  counted by every node; membership and routing carry on;
* a materializer that raises (a fault installed by the launcher tests/faultnode.py: it
  raises on applying one changelog key) never lets its node answer from frozen rows: peers route
  to the standby, and the node either recovers by restarting the materializer from its
  checkpoints, or, when the fault keeps coming back, turns not ready, leaves the
  cluster and exits non-zero.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from changelog import produce_rows
from confluent_kafka import KafkaError, Message, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
)
from faultnode import launcher
from procs import HTTP, free_port

from streamiq.kafka.admin import ensure_topics
from streamiq.routing.assignment import assign
from streamiq.routing.epochs import EpochTopics
from streamiq.routing.membership import MAX_HEARTBEAT_BYTES, members_topic
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

N_ACCOUNTS = 300
STANDBY = ["--standby-replicas", "1"]


def _rows(n: int = N_ACCOUNTS, bump: int = 0) -> list[dict[str, Any]]:
    return [{"account": f"a{i}", "balance": i + bump, "count": 1, "last_update": 0}
            for i in range(n)]


def _get(port: int, path: str) -> httpx.Response:
    return HTTP.get(f"http://127.0.0.1:{port}{path}", timeout=5)


def _health(port: int) -> dict[str, Any]:
    doc: dict[str, Any] = _get(port, "/health").json()  # 503 bodies carry the same fields
    return doc


def _until(cond: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Bounded wait for a condition (polls; never asserts on how long it took)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.1)


def _members(port: int) -> list[str]:
    return sorted(n["endpoint"] for n in _get(port, "/v1/cluster").json()["nodes"])


def _balances_topic(cluster: Any) -> str:
    topic: str = cluster.topic(BALANCES.changelog_topic)
    ensure_topics({"bootstrap.servers": cluster.bootstrap}, {topic: 3})
    produce_rows(cluster.bootstrap, topic, BALANCES, _rows())
    return topic


def _lookups_ok(ports: list[int], accounts: range, updated: frozenset[int] = frozenset()
                ) -> list[Any]:
    """Every (entry port, account) whose lookup is not 200 with the expected balance
    (``updated`` accounts were bumped by 1000)."""
    bad = []
    for port in ports:
        for i in accounts:
            r = _get(port, f"/account/a{i}")
            want = i + 1000 if i in updated else i
            if r.status_code != 200 or r.json()["value"]["balance"] != want:
                bad.append((port, i, r.status_code, r.text[:160]))
    return bad


# -- junk on the members topic ---------------------------------------------------------

def _junk() -> list[bytes]:
    fake = "127.0.0.1:1"  # a would-be member: must never show up in /v1/cluster
    return [
        b"{not json",
        bytes(range(256)) * 4,  # binary
        json.dumps({"endpoint": fake, "incarnation": "x",
                    "pad": "x" * (MAX_HEARTBEAT_BYTES + 1000)}).encode(),  # oversized
        json.dumps({"endpoint": 9001, "incarnation": "x"}).encode(),  # wrong type
        json.dumps({"endpoint": fake}).encode(),  # missing incarnation
        json.dumps({"endpoint": fake, "incarnation": "x",
                    "partitions": {"balances": {"zero": {"offset": "a"}}}}).encode(),  # junk map
        json.dumps(["a", "list"]).encode(),
    ]


def test_junk_on_the_members_topic_is_skipped_and_routing_carries_on(cluster: Any) -> None:
    _balances_topic(cluster)
    ports = [port for port, _ in cluster.nodes(3, "bank", STANDBY)]
    endpoints = sorted(f"127.0.0.1:{p}" for p in ports)
    _until(lambda: all(_members(p) == endpoints for p in ports), "3 members seen by all")
    before = {p: _health(p)["skipped_records"]["membership"] for p in ports}

    junk = _junk()
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0,
                         "message.max.bytes": 4 * MAX_HEARTBEAT_BYTES})
    # the topic of the current membership epoch (routing/epochs.py; default 60 s period)
    topic = EpochTopics(cluster.topic(members_topic(cluster.name)), 60).publish(time.time())
    # a topic that takes records past the nodes' heartbeat limit (Kafka's default is
    # about that limit): the nodes' own check is the one under test
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    big = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", str(4 * MAX_HEARTBEAT_BYTES),
                    incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([big]).values():
        fut.result(30)
    failed: list[KafkaError] = []

    def delivered(err: KafkaError | None, _m: Message) -> None:
        if err is not None:
            failed.append(err)

    for raw in junk:
        producer.produce(topic, key=b"junk", value=raw, on_delivery=delivered)
    assert producer.flush(30) == 0 and failed == [], failed

    _until(lambda: all(_health(p)["skipped_records"]["membership"] >= before[p] + len(junk)
                       for p in ports), "every node to count the junk as skipped")
    # Before issue 13 the first bad record killed every node's listener: a member timeout
    # later each node saw only itself. Give it two timeouts (1.5 s each), then check.
    time.sleep(3.0)
    for p in ports:
        assert _members(p) == endpoints, p
        cluster_doc = _get(p, "/v1/cluster").json()
        assert cluster_doc["health"]["skipped_records"]["membership"] >= before[p] + len(junk)
        assert cluster_doc["health"]["faults"] == {}, cluster_doc["health"]  # nothing crashed
        assert _get(p, "/health").status_code == 200
    assert _lookups_ok(ports, range(0, N_ACCOUNTS, 7)) == []


# -- a materializer that raises ----------------------------------------------------------

class Watch:
    """Polls the faulty node's /health in the background: did it ever report not ready,
    and from when on had its materializer faulted (after which it must never answer
    with rows from before the poison record)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.statuses: set[int] = set()
        self.faulted = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                r = _get(self.port, "/health")
            except httpx.HTTPError:  # exited
                time.sleep(0.02)
                continue
            self.statuses.add(r.status_code)
            if r.json()["faults"].get("materializer", 0) > 0:
                self.faulted.set()
            time.sleep(0.02)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _plan(cluster: Any) -> tuple[list[int], int, str, list[int]]:
    """Ports of 3 nodes, the partition the first one will be active for, a poison key
    in that partition and accounts in it (assignment is a pure function of the ports)."""
    while True:
        ports = [free_port() for _ in range(3)]
        target = f"127.0.0.1:{ports[0]}"
        plan = assign(sorted(f"127.0.0.1:{p}" for p in ports), 3, 2)
        mine = [p for p, owners in plan.items() if owners[0] == target]
        if mine:
            break
    p = mine[0]
    poison = next(k for k in (f"poison{j}" for j in range(1000))
                  if BALANCES.partition_of(k, 3) == p)
    accounts = [i for i in range(N_ACCOUNTS) if BALANCES.partition_of(f"a{i}", 3) == p][:15]
    return ports, p, poison, accounts


@pytest.fixture
def faulty_cluster(cluster: Any, request: Any
                   ) -> Iterator[tuple[str, list[tuple[int, Any]], str, list[int]]]:
    """A 3-node cluster whose first node's materializer raises on the poison key
    (``request.param`` times; 0: every time)."""
    topic = _balances_topic(cluster)
    ports, p, poison, accounts = _plan(cluster)
    first = cluster.node("bank", ports[0], STANDBY, wait=False,
                         prefix=launcher(poison, request.param))
    nodes = [first] + [cluster.node("bank", port, STANDBY, wait=False) for port in ports[1:]]
    for port, proc in nodes:
        proc.wait_ready(f"http://127.0.0.1:{port}/health", 60)
    endpoints = sorted(f"127.0.0.1:{port}" for port in ports)
    _until(lambda: all(_members(port) == endpoints for port in ports), "3 members")
    meta = _get(ports[1], f"/v1/metadata/balances/a{accounts[0]}").json()
    assert meta["partition"] == p and meta["active"] == f"127.0.0.1:{ports[0]}", meta
    yield topic, nodes, poison, accounts


def _poison_and_update(cluster: Any, topic: str, poison: str, accounts: list[int]) -> None:
    """The poison record, then new balances (+1000) for accounts in the same partition:
    the faulty node never applies them until it gets past the poison."""
    rows = [{"account": poison, "balance": -1, "count": 1, "last_update": 0}]
    rows += [{"account": f"a{i}", "balance": i + 1000, "count": 1, "last_update": 1}
             for i in accounts]
    produce_rows(cluster.bootstrap, topic, BALANCES, rows)


def _observe(entries: list[int], faulty: int, accounts: list[int], watch: Watch,
             until: Callable[[], bool], timeout: float = 90) -> dict[str, Any]:
    """Look the accounts up through every entry until ``until()``; classify answers."""
    seen: dict[str, Any] = {"answers": 0, "failed": [], "stale": [], "by": set(),
                            "roles": set()}
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "gave up waiting for the episode to end"
        for port in entries:
            for i in accounts:
                checked = watch.faulted.is_set()  # before the request: strict from here
                try:
                    r = _get(port, f"/account/a{i}")
                except httpx.TransportError:
                    if port == faulty:
                        continue  # the faulty node exited: its connections are gone
                    raise
                if r.status_code != 200:
                    seen["failed"].append((port, i, r.status_code, r.text[:160]))
                    continue
                doc = r.json()
                seen["answers"] += 1
                old = doc["value"]["balance"] == i
                if checked and old and (doc["served_by"] == f"127.0.0.1:{faulty}"
                                        or doc["role"] == "active"):
                    seen["stale"].append((port, i, doc))
                if checked:
                    seen["by"].add(doc["served_by"])
                    seen["roles"].add(doc["role"])
    return seen


def _episode(cluster: Any, faulty_cluster: Any, done: Callable[[int, Any], bool]
             ) -> tuple[list[tuple[int, Any]], list[int], dict[str, Any]]:
    """Poison the first node's partition and look its accounts up through every node
    until ``done(port, proc)``. Whatever happens to the faulty node, no lookup fails, none
    is answered from its frozen rows, and it reported itself not ready meanwhile."""
    topic, nodes, poison, accounts = faulty_cluster
    faulty, proc = nodes[0]
    with Watch(faulty) as watch:
        _poison_and_update(cluster, topic, poison, accounts)
        _until(watch.faulted.is_set, "the injected fault")
        seen = _observe([port for port, _ in nodes], faulty, accounts, watch,
                        lambda: done(faulty, proc))
    print(f"\nafter the fault: {seen['answers']} answers by {sorted(seen['by'])}, roles "
          f"{sorted(seen['roles'])}; faulty node's /health statuses {sorted(watch.statuses)}")
    assert seen["failed"] == [], seen["failed"][:10]
    assert seen["stale"] == [], seen["stale"][:10]
    assert 503 in watch.statuses  # not ready while its materializer was down
    return nodes, accounts, seen


@pytest.mark.parametrize("faulty_cluster", [4], indirect=True)
def test_a_materializer_that_raises_is_restarted_and_never_serves_frozen_rows(
        cluster: Any, faulty_cluster: Any) -> None:
    def recovered(port: int, _: Any) -> bool:
        h = _health(port)
        return h["ready"] and h["faults"].get("materializer") == 4 and not h["down"]

    nodes, accounts, seen = _episode(cluster, faulty_cluster, recovered)
    (faulty, proc), *_ = nodes
    entries = [port for port, _ in nodes]
    me = f"127.0.0.1:{faulty}"
    assert proc.alive()
    assert seen["answers"] > 0 and seen["by"] - {me}  # others answered for its partition
    health = _health(faulty)
    assert health["failed"] is None and health["faults"] == {"materializer": 4}, health
    assert "materializer failed (fault 1, 1 in a row)" in proc.log()
    # recovered from its checkpoints: the new rows, and the active role, are its again
    assert _lookups_ok(entries, range(0, N_ACCOUNTS, 7), frozenset(accounts)) == []
    for i in accounts:
        for port in entries:
            doc = _get(port, f"/account/a{i}").json()
            assert doc["value"]["balance"] == i + 1000, doc
    _until(lambda: _get(entries[1], f"/account/a{accounts[0]}").json()["served_by"] == me,
           "routing back to the recovered active")


@pytest.mark.parametrize("faulty_cluster", [0], indirect=True)
def test_a_materializer_that_keeps_failing_makes_its_node_leave_and_exit_non_zero(
        cluster: Any, faulty_cluster: Any) -> None:
    nodes, accounts, seen = _episode(cluster, faulty_cluster, lambda _, proc: not proc.alive())
    (faulty, proc), *others = nodes
    alive = [port for port, _ in others]
    assert proc.proc is not None and proc.proc.wait(30) == 1
    log = proc.log()
    assert "materializer failed 6 times in a row: giving up" in log
    assert "exiting with status 1" in log
    assert f"127.0.0.1:{faulty}" not in seen["by"]  # never answered once it had faulted
    # peers dropped it (its leaving heartbeat) and serve its partition with the new rows
    _until(lambda: all(_members(port) == sorted(f"127.0.0.1:{q}" for q in alive)
                       for port in alive), "the failed node to leave the cluster")
    for i in accounts:
        for port in alive:
            doc = _get(port, f"/account/a{i}").json()
            assert doc["value"]["balance"] == i + 1000, doc
            assert doc["served_by"] != f"127.0.0.1:{faulty}", doc
    assert _lookups_ok(alive, range(0, N_ACCOUNTS, 7), frozenset(accounts)) == []
