"""Nodes join and leave under reads and writes (issue 49): 3 -> 6 -> 3 nodes, 12 partitions.

The view's changelog has 12 partitions, so each node added takes a visible share. While
readers look keys up through the nodes a load balancer offers and a writer appends new
versions of the keys to the changelog, three nodes join one at a time, then the three
first ones leave one at a time (a planned removal: out of the load balancer, drained,
SIGTERM, and the next one only when every partition has its replicas again, as an
operator would). Every answer is a version that was written (a stale one is allowed, a
missing key or a value never written is wrong), none fails, and at the end every node
answers every key's last version. How long each new node took to serve its share, and
each removal to be replicated again, is printed.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

import httpx
import pytest
from changelog import produce_rows

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

PARTITIONS = 12
ACCOUNTS = 24_000
READERS = 4
PHASE_READS = 200  # reads through each phase at least (a loaded machine asks fewer a second)


def _row(i: int, version: int) -> dict[str, Any]:
    """Account ``a{i}``'s ``version``-th row: its balance names both (i + ACCOUNTS * v)."""
    return {"account": f"a{i}", "balance": i + ACCOUNTS * version, "count": version + 1,
            "last_update": version}


class Load:
    """Readers through ``entry`` and one writer of new versions, checked as they go."""

    def __init__(self, bootstrap: str, topic: str, entry: list[int]) -> None:
        self.bootstrap, self.topic, self.entry = bootstrap, topic, entry
        self.written = [0] * ACCOUNTS  # the newest version handed to the producer
        self.ok = 0
        self.wrong: list[Any] = []
        self.failed: list[Any] = []
        self.in_flight: Counter[int] = Counter()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._read, args=(n,), daemon=True)
                        for n in range(READERS)]
        self.threads.append(threading.Thread(target=self._write, daemon=True))
        self.writes = 0
        self.write_error: list[str] = []

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(120)

    def reads(self) -> int:
        return self.ok + len(self.wrong) + len(self.failed)

    def _read(self, seed: int) -> None:
        rng = random.Random(seed)
        with httpx.Client(timeout=10) as c:
            while not self.stop.is_set():
                i = rng.randrange(ACCOUNTS)
                with self.lock:
                    port = rng.choice(self.entry)
                    self.in_flight[port] += 1
                newest = self.written[i]
                try:
                    r = c.get(f"http://127.0.0.1:{port}/account/a{i}")
                except httpx.HTTPError as exc:
                    self.failed.append((port, i, repr(exc)))
                    continue
                finally:
                    with self.lock:
                        self.in_flight[port] -= 1
                self._check(port, i, newest, r)
                time.sleep(0.005)

    def _check(self, port: int, i: int, newest: int, r: httpx.Response) -> None:
        """200 with a version written (at least the initial one, at most the newest
        handed to the producer by the time the answer came)."""
        if r.status_code != 200:
            bucket = self.wrong if r.status_code == 404 else self.failed
            bucket.append((port, i, r.status_code, r.text[:300]))
            return
        balance = r.json()["value"]["balance"]
        version, rest = divmod(balance - i, ACCOUNTS)
        if rest != 0 or not 0 <= version <= max(newest, self.written[i]):
            self.wrong.append((port, i, balance, self.written[i]))
        else:
            self.ok += 1

    def _write(self) -> None:
        """New versions of random keys, ~200 a second, produced as the pipeline would."""
        from confluent_kafka import Producer

        rng = random.Random(99)
        p = Producer({"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random",
                      "linger.ms": 5, "enable.idempotence": True})
        try:
            while not self.stop.is_set():
                for _ in range(20):
                    i = rng.randrange(ACCOUNTS)
                    self.written[i] += 1
                    p.produce(self.topic, key=f"a{i}".encode(),
                              value=json.dumps(_row(i, self.written[i])).encode())
                    self.writes += 1
                p.poll(0)
                time.sleep(0.1)
        finally:
            left = p.flush(60)
            if left:
                self.write_error.append(f"{left} writes not delivered")


def _cluster_map(port: int) -> dict[str, Any]:
    return httpx.get(f"http://127.0.0.1:{port}/v1/cluster", timeout=10).json()  # type: ignore[no-any-return]


def _replicated(ports: list[int]) -> bool:
    """Every node sees exactly ``ports`` and every partition served by all its assigned
    replicas, restored, its assigned active first."""
    for port in ports:
        meta = _cluster_map(port)
        if sorted(n["endpoint"] for n in meta["nodes"]) != sorted(
                f"127.0.0.1:{p}" for p in ports):
            return False
        for pv in meta["views"][BALANCES.name].values():
            held = [r["address"] for r in pv["replicas"]]
            if not pv["assigned"] or held[:1] != pv["assigned"][:1] or not set(
                    pv["assigned"]) <= set(held):
                return False
    return True


def _until(cond: Callable[[], object], what: str, timeout: float = 180,
           show: Callable[[], object] = lambda: None) -> float:
    """Wait for ``cond()`` to be true; the seconds it took (printed, never asserted);
    on timeout fail naming ``what`` and what ``show()`` says."""
    t0 = time.monotonic()
    while cond() is not True:
        assert time.monotonic() - t0 < timeout, f"gave up waiting for {what}: {show()}"
        time.sleep(0.1)
    return time.monotonic() - t0


def _phase(load: Load) -> None:
    """Let the load run through a phase: PHASE_READS more reads at least."""
    start = load.reads()
    _until(lambda: load.reads() - start >= PHASE_READS, f"{PHASE_READS} reads", 120)


def _drained(load: Load, port: int) -> bool:
    return load.in_flight[port] == 0


def _active_share(port: int) -> int:
    """Partitions this node is assigned active for and serves as active."""
    me = f"127.0.0.1:{port}"
    return sum(1 for pv in _cluster_map(port)["views"][BALANCES.name].values()
               if pv["assigned"][:1] == [me] and pv["replicas"][:1]
               and pv["replicas"][0]["address"] == me)


def _exact(ports: list[int], written: list[int]) -> bool | str:
    for port in ports:
        for lo in range(0, ACCOUNTS, 1_000):
            keys = [f"a{i}" for i in range(lo, min(lo + 1_000, ACCOUNTS))]
            r = httpx.post(f"http://127.0.0.1:{port}/v1/views/balances/keys",
                           json={"keys": keys}, timeout=30)
            if r.status_code != 200:
                return f"{port}: {r.status_code} {r.text[:200]}"
            for res in r.json()["results"]:
                i = int(res["key"][1:])
                got = (res.get("value") or {}).get("balance")
                if got != i + ACCOUNTS * written[i]:
                    return f"{port}: a{i} {got} != {i + ACCOUNTS * written[i]}"
    return True


def test_three_to_six_to_three_nodes_under_reads_and_writes(cluster: Any) -> None:
    topic = cluster.topic(BALANCES.changelog_topic)
    ensure_topics({"bootstrap.servers": cluster.bootstrap}, {topic: PARTITIONS})
    produce_rows(cluster.bootstrap, topic, BALANCES, (_row(i, 0) for i in range(ACCOUNTS)))
    standby = ["--standby-replicas", "1"]
    nodes = dict(cluster.nodes(3, "bank", standby))
    first = list(nodes)
    _until(lambda: _replicated(first), "the first three nodes settled",
           show=lambda: _cluster_map(first[0]))
    entry = list(first)
    load = Load(cluster.bootstrap, topic, entry)
    load.start()
    timings: list[str] = []
    try:
        _phase(load)
        for _ in range(3):  # grow: a node at a time, into the load balancer once ready
            t0 = time.monotonic()
            port, proc = cluster.node("bank", extra=standby)  # returns once /health is 200
            ready = time.monotonic() - t0
            nodes[port] = proc
            with load.lock:
                entry.append(port)
            settled = ready + _until(lambda: _replicated(list(nodes)), "the cluster settled")
            timings.append(f"node {port} joined: ready in {ready:.1f} s, serving its "
                           f"{_active_share(port)} active partitions in {settled:.1f} s")
            _phase(load)
        assert len(nodes) == 6
        for port in first:  # shrink: the first three leave, one at a time
            with load.lock:
                entry.remove(port)
            _until(partial(_drained, load, port), f"the reads in flight to {port}", 30)
            nodes.pop(port).stop()
            took = _until(lambda: _replicated(list(nodes)), "the cluster replicated again")
            timings.append(f"node {port} left: every partition replicated again in "
                           f"{took:.1f} s")
            _phase(load)
    finally:
        load.finish()
    print("\n" + "\n".join(timings))
    print(f"{load.reads()} reads: {load.ok} ok, {len(load.wrong)} wrong, "
          f"{len(load.failed)} failed; {load.writes} writes")
    assert load.write_error == [], load.write_error
    assert load.wrong == [] and load.failed == [], (load.wrong[:10], load.failed[:10])
    assert load.reads() > 6 * PHASE_READS and load.writes > 0
    last = list(nodes)
    assert len(last) == 3 and not set(last) & set(first)
    _until(lambda: _exact(last, load.written), "every key's last version on every node",
           120, show=lambda: _exact(last, load.written))
