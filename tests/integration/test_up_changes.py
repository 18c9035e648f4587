"""Live subscriptions through ``streamiq up`` (issue 40's must-show): writes go through
the ingest (POST /account/..., POST /orders), the pipeline and the changelog; a
subscriber reads ``/changes`` from one node for a key another node owns. One ``up``
(broker, ingest, pipeline, 3 nodes) shared by the module's tests.

What a key's stream must show is read back from Kafka: the key's records in the
balances changelog, in order. The stream delivers exactly those (no gap, no duplicate,
in order) and ends at the exact balance, also when the owner is SIGKILLed or SIGSTOPped
under the writes (the entry resumes on another replica from its last position).
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import httpx
import pytest
from confluent_kafka import Consumer, TopicPartition
from sse import Sse
from updemo import HEADERS, START_S, Up, post_json, until

from streamiq.client import Client
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

WRITES = 120


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    u = Up(tmp_path_factory.mktemp("upchanges"), flags=("--restart-max-s", "5"))
    try:
        u.start()
        yield u
    finally:
        u.kill_everything()


def _owned_elsewhere(up: Up, entry: int, tag: str) -> tuple[str, int]:
    """A new key whose owner is not ``entry``, and its owner's port."""
    token = HEADERS["authorization"].removeprefix("Bearer ")
    with Client(f"127.0.0.1:{entry}", token=token) as c:
        c.refresh()
        for i in range(1000):
            key = f"{tag}-{uuid.uuid4().hex[:6]}-{i}"
            owner = c.owner("balances", key)
            if owner is not None and not owner.endswith(f":{entry}"):
                return key, int(owner.rsplit(":", 1)[1])
    raise AssertionError("every key owned by the entry node")


def _changelog(up: Up, key: str, n: int) -> list[tuple[int, int]]:
    """The key's (balance, count) records in the balances changelog, up to count ``n``."""
    consumer = Consumer({"bootstrap.servers": f"127.0.0.1:{up.broker_port}",
                         "group.id": f"t-{uuid.uuid4().hex}", "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(BALANCES.changelog_topic, timeout=30)
        parts = meta.topics[BALANCES.changelog_topic].partitions
        consumer.assign([TopicPartition(BALANCES.changelog_topic, p, 0) for p in parts])
        out: list[tuple[int, int]] = []
        deadline = time.monotonic() + 120  # a bound, not a timing
        while not out or out[-1][1] < n:
            assert time.monotonic() < deadline, f"changelog of {key}: {out}"
            m = consumer.poll(1)
            if m is None or m.error() or m.key() != key.encode() or m.value() is None:
                continue
            v = json.loads(m.value() or b"null")
            out.append((v["balance"], v["count"]))
        return out
    finally:
        consumer.close()


def _subscribe(entry: int, key: str) -> Sse:
    """A stream of ``key`` from ``entry``, read past its starting value (none yet)."""
    s = Sse(f"http://127.0.0.1:{entry}/v1/views/balances/changes", timeout=60,
            params={"key": key}, headers=HEADERS)
    assert s.response.status_code == 200, s.response.read()
    first = s.event()
    assert first.event is None and first.data["found"] is False, first
    assert s.event().event == "ready"
    return s


def _write(up: Up, key: str, amounts: list[int], at: int, fault: Callable[[], None]
           ) -> threading.Thread:
    """POST the amounts to ``key`` through the ingest in order; ``fault()`` after ``at``."""

    def run() -> None:
        with httpx.Client(headers=HEADERS, base_url=f"http://127.0.0.1:{up.ingest_port}",
                          timeout=60) as c:
            for i, amount in enumerate(amounts):
                post_json(c, f"/account/{key}", params={"amount": amount})
                if i == at:
                    fault()
                time.sleep(0.02)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _received(s: Sse, n: int) -> list[tuple[int, int]]:
    """(balance, count) of each change until the count reaches ``n`` writes."""
    out: list[tuple[int, int]] = []
    ids: list[str] = []
    while not out or out[-1][1] < n:
        e = s.event()
        assert e.event is None, f"the stream was cut: {e} after {out}"
        assert e.id is not None and e.id not in ids, (e, ids[-3:])
        ids.append(e.id)
        out.append((e.data["value"]["balance"], e.data["value"]["count"]))
    return out


def _through_a_fault(up: Up, tag: str, stop: bool) -> None:
    entry = up.node_ports[0]
    key, owner = _owned_elsewhere(up, entry, tag)
    pid = up.child("node", owner)
    amounts = [random.Random(tag).randint(1, 100) for _ in range(WRITES)]

    def fault() -> None:
        if stop:
            os.kill(pid, signal.SIGSTOP)
            threading.Timer(8, os.kill, (pid, signal.SIGCONT)).start()
        else:
            os.kill(pid, signal.SIGKILL)

    with _subscribe(entry, key) as s:
        writer = _write(up, key, amounts, WRITES // 3, fault)
        got = _received(s, WRITES)
        writer.join(120)
    assert got[-1] == (sum(amounts), WRITES)  # the exact balance
    assert [c for _, c in got] == sorted({c for _, c in got})  # in order, none twice
    assert got == _changelog(up, key, WRITES)  # every change: what the changelog holds


def test_a_key_owned_elsewhere_streams_through_a_sigkill_of_its_owner(up: Up) -> None:
    _through_a_fault(up, "kill", stop=False)


def test_a_key_owned_elsewhere_streams_through_a_sigstop_of_its_owner(up: Up) -> None:
    owner_back = up.node_ports  # the killed node is restarted by up meanwhile
    until(lambda: all(httpx.get(f"http://127.0.0.1:{p}/health", timeout=5).status_code
                      == 200 for p in owner_back), START_S, "every node back")
    _through_a_fault(up, "stop", stop=True)


def test_an_aggregate_subscription_ends_at_the_exact_totals(up: Up) -> None:
    """Order counts by type under a prefix of new stores, from a node: results only
    grow (no count twice) and the last is the exact totals."""
    prefix = f"ag{uuid.uuid4().hex[:6]}"
    rng = random.Random(3)
    want: Counter[str] = Counter()
    url = f"http://127.0.0.1:{up.node_ports[1]}/v1/views/order_counts/aggregate/changes"
    params = {"group_by": "type", "agg": "sum(count)", "prefix": prefix, "interval": "50"}
    with Sse(url, timeout=60, params=params, headers=HEADERS) as s:
        assert s.event().data["groups"] == []
        with httpx.Client(headers=HEADERS, base_url=f"http://127.0.0.1:{up.ingest_port}",
                          timeout=60) as c:
            for i in range(100):
                kind = rng.choice(["GENERAL", "RESTAURANT"])
                post_json(c, "/orders", json={
                    "order_id": f"{prefix}-{i}", "store": f"{prefix}-s{rng.randrange(4)}",
                    "type": kind, "amount": rng.randint(1, 99)})
                want[kind] += 1
        seen: dict[str, int] = {}
        while seen != want:
            e = s.event()
            assert e.event is None and e.data["status"] == "OK", e
            now = {g["type"]: g["sum(count)"] for g in e.data["groups"]}
            assert all(now.get(k, 0) >= v for k, v in seen.items()), (seen, now)
            assert all(v <= want[k] for k, v in now.items()), (now, want)
            seen = now
