"""No poison pill on a changelog (issue 28), through a real node on Apache Kafka.

Records are produced straight to the changelog topics while the node serves: a marker
and a row holding deeply nested JSON, a row in another partition than its key's, a row
off its view's schema, markers claiming input offsets past the input's end or for a
partition it does not have, a record larger than a node stores, random bytes. The node
stays up and ready, never restarts its materializer, every good key answers exactly,
scans and aggregates count each row once, a position token past the input's real end is
not reported reached, and each record is counted as skipped under its reason. Restarted,
the node does not meet them again (its offsets went past them).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from changelog import produce_rows
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from procs import HTTP
from updemo import same, until

from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.partitioner import partition_for
from streamiq.views.bank import BALANCES
from streamiq.views.base import MARKER_HEADER, MARKER_KEY, marker_value
from streamiq.views.orders import ORDER_COUNTS

pytestmark = pytest.mark.integration

P = 3
INPUT_END = 5  # records on the input topic's partition 0 before the node starts
ACCOUNTS = {f"a{i}": 10 * i + 3 for i in range(60)}
ORDERS = {f"s{i}|{t}": i + 1 for i in range(8) for t in ("GENERAL", "RESTAURANT")}
DEEP = b"[" * 100_000 + b"]" * 100_000  # a RecursionError for json.loads
HUGE = 5 << 20  # bytes: more than a node stores (views/rows.py MAX_RECORD_BYTES)


class Env:
    """One node serving bank and orders over changelogs the test writes itself."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.input = cluster.topic("orders")
        self.balances = cluster.topic(BALANCES.changelog_topic)
        self.orders = cluster.topic(ORDER_COUNTS.changelog_topic)
        conf = {"bootstrap.servers": cluster.bootstrap}
        ensure_topics(conf, {self.input: P, self.balances: P, self.orders: P})
        self.producer: Any = Producer({**conf, "linger.ms": 5, "partitioner": "murmur2_random",
                                  "message.max.bytes": 2 * HUGE})
        self.port = 0
        self.proc: Any = None
        self.sentinels: dict[str, int] = {}

    def start(self) -> None:
        self.port, self.proc = self.cluster.node("bank,orders", self.port or None)

    def produce(self, topic: str, key: bytes | None, value: bytes | None,
                partition: int | None = None, marker: bool = False) -> None:
        kw: dict[str, Any] = {"headers": [(MARKER_HEADER, b"1")]} if marker else {}
        if partition is not None:
            kw["partition"] = partition
        self.producer.produce(topic, key=key, value=value, **kw)

    def markers(self, topic: str, offsets: dict[str, dict[int, int]] | bytes) -> None:
        raw = offsets if isinstance(offsets, bytes) else marker_value(1, offsets)
        for p in range(P):
            self.produce(topic, MARKER_KEY, raw, partition=p, marker=True)

    def flush(self) -> None:
        assert self.producer.flush(60) == 0

    def sentinel(self) -> None:
        """A new good order row in every partition, after whatever came before, and wait
        until the node answers them all (then it has read past the records before)."""
        new: dict[str, int] = {}
        n = len(self.sentinels)
        while len(new) < P:
            key = f"z{n}|GENERAL"
            if partition_for(key.encode(), P) not in {partition_for(k.encode(), P)
                                                      for k in new}:
                new[key] = 1000 + n
            n += 1
        produce_rows(self.cluster.bootstrap, self.orders, ORDER_COUNTS, [
            {"store": k.split("|")[0], "type": "GENERAL", "count": c, "revenue": 0.0}
            for k, c in new.items()])
        self.sentinels.update(new)

        def served() -> bool | str:
            got = {k: self.get(f"/v1/views/order_counts/keys/{k}").json()
                   .get("value", {}).get("count") for k in self.sentinels}
            return same(got, self.sentinels)

        until(served, 90, "the node to read past the records produced")

    def orders_expected(self) -> dict[str, int]:
        return {**ORDERS, **self.sentinels}

    def get(self, path: str, **params: Any) -> httpx.Response:
        return HTTP.get(f"http://127.0.0.1:{self.port}{path}", params=params, timeout=30)

    def health(self) -> dict[str, Any]:
        doc: dict[str, Any] = self.get("/health").json()
        return doc

    def skips(self) -> dict[tuple[str, str], float]:
        text = self.get("/metrics").text
        return {(m["view"], m["reason"]): float(m["n"]) for m in re.finditer(
            r'^streamiq_changelog_records_skipped_total\{reason="(?P<reason>[^"]+)",'
            r'view="(?P<view>[^"]+)"\} (?P<n>\S+)$', text, re.MULTILINE)}


@pytest.fixture
def env(cluster: Any) -> Iterator[Env]:
    e = Env(cluster)
    for _ in range(INPUT_END):
        e.produce(e.input, b"k", b"{}", partition=0)
    produce_rows(cluster.bootstrap, e.balances, BALANCES, [
        {"account": a, "balance": b, "count": 1, "last_update": 0} for a, b in ACCOUNTS.items()])
    produce_rows(cluster.bootstrap, e.orders, ORDER_COUNTS, [
        {"store": k.split("|")[0], "type": k.split("|")[1], "count": n, "revenue": 1.5 * n}
        for k, n in ORDERS.items()])
    e.markers(e.orders, {e.input: {0: INPUT_END}})  # as the pipeline's sink: true
    e.flush()
    e.start()
    yield e
    e.producer = None  # its client goes now, not when the session's broker has stopped


def _exact(env: Env) -> bool | str:
    """Every good key answers exactly; a scan lists each order key once, with its count."""
    got = {a: env.get(f"/account/{a}").json().get("value", {}).get("balance")
           for a in ACCOUNTS}
    if (diff := same(got, ACCOUNTS)) is not True:
        return f"balances: {diff}"
    scan = env.get("/v1/views/order_counts/scan", limit=1000)
    assert scan.status_code == 200, scan.text
    rows = scan.json()["rows"]
    assert sorted(r["key"] for r in rows) == sorted(env.orders_expected()), rows
    return same({r["key"]: r["value"]["count"] for r in rows}, env.orders_expected())


def _aggregates_exact(env: Env) -> None:
    want = env.orders_expected()
    agg = env.get("/v1/views/order_counts/aggregate", group_by="type", agg="sum(count)")
    assert agg.status_code == 200, agg.text
    assert agg.json()["groups"] == [
        {"type": t, "sum(count)": sum(n for k, n in want.items() if k.endswith(t))}
        for t in ("GENERAL", "RESTAURANT")], agg.text
    count = env.get("/v1/views/order_counts/aggregate", agg="count(*)")
    assert count.status_code == 200 and count.json()["groups"] == [
        {"count(*)": len(want)}], count.text


def _served_on(env: Env, skipped: dict[tuple[str, str], float]) -> None:
    """The node is up and ready, never restarted a part, answers exactly, and counted
    ``skipped`` (by view and reason)."""
    health = env.health()
    assert env.proc.alive() and health["ready"], health
    assert health["faults"] == {} and health["failed"] is None, health
    assert _exact(env) is True, _exact(env)
    _aggregates_exact(env)
    assert env.skips() == skipped
    assert health["skipped_records"]["changelog"] == sum(skipped.values()), health


def _position(env: Env, offset: int, wait_ms: int = 300) -> httpx.Response:
    return env.get("/v1/views/order_counts/aggregate", agg="count(*)", wait_ms=wait_ms,
                   position=f"{env.input}:0:{offset}")


@pytest.fixture
def served(env: Env) -> Env:
    """The env once the node answers every good row."""
    until(lambda: _exact(env), 60, "every good row served")
    return env


def test_deeply_nested_json_is_skipped(served: Env) -> None:
    env = served
    env.markers(env.orders, b'{"batch_id": 2, "offsets": ' + DEEP + b"}")
    env.produce(env.orders, b"s1|GENERAL", DEEP)
    env.produce(env.orders, b"s1|GENERAL", b'{"store": "s1", "type": "GENERAL", "count": '
                + DEEP + b"}")
    env.flush()
    env.sentinel()
    _served_on(env, {("order_counts", "bad_marker"): P, ("order_counts", "not_json"): 2})


def test_a_row_in_another_partition_than_its_keys_is_not_counted_twice(served: Env) -> None:
    env = served
    dup = "s0|GENERAL"
    env.produce(env.orders, dup.encode(), json.dumps(
        {"store": "s0", "type": "GENERAL", "count": 1000, "revenue": 1.0}).encode(),
        partition=(partition_for(dup.encode(), P) + 1) % P)
    env.flush()
    env.sentinel()
    _served_on(env, {("order_counts", "wrong_partition"): 1})


def test_a_row_off_the_schema_leaves_aggregates_answering(served: Env) -> None:
    env = served
    env.produce(env.orders, b"x", json.dumps({"count": 1}).encode())  # no store, no type
    env.produce(env.orders, b"s2|GENERAL", json.dumps(
        {"store": "s2", "type": "GENERAL", "count": "many", "revenue": 1.0}).encode())
    env.produce(env.orders, b"s3|GENERAL", json.dumps(
        {"store": "s3", "type": "RESTAURANT", "count": 1, "revenue": 1.0}).encode())
    env.flush()
    env.sentinel()
    _served_on(env, {("order_counts", "missing_column"): 1, ("order_counts", "wrong_type"): 1,
                     ("order_counts", "key_mismatch"): 1})


def test_a_marker_past_the_input_end_does_not_reach_a_token(served: Env) -> None:
    env = served
    assert _position(env, INPUT_END - 1).status_code == 200  # the sink's true marker
    env.markers(env.orders, {env.input: {0: 10**12}})  # far past the input's end
    env.markers(env.orders, {env.input: {7: 1}})  # a partition the input does not have
    env.markers(env.orders, {"no-such-topic": {0: 1}})
    env.flush()
    env.sentinel()
    beyond = _position(env, INPUT_END + 10)
    assert beyond.status_code == 503, beyond.text
    assert beyond.json()["code"] == "NOT_UP_TO_BOUND", beyond.text
    _served_on(env, {("order_counts", "marker_beyond_end"): P,
                     ("order_counts", "marker_unknown_partition"): 2 * P})
    # the input grows and the pipeline's next marker claims it: reached (not for good)
    for _ in range(20):
        env.produce(env.input, b"k", b"{}", partition=0)
    env.flush()  # as a pipeline does: it claims only input it has read (so acked)
    env.markers(env.orders, {env.input: {0: INPUT_END + 20}})
    env.flush()
    assert _position(env, INPUT_END + 10, wait_ms=30_000).status_code == 200


def test_huge_and_random_records_are_skipped_and_not_met_again_after_a_restart(
        served: Env) -> None:
    env = served
    admin = AdminClient({"bootstrap.servers": env.cluster.bootstrap})
    for topic in (env.orders, env.balances):  # records past the node's limit get there
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry("max.message.bytes", str(2 * HUGE),
                        incremental_operation=AlterConfigOpType.SET)])
        for fut in admin.incremental_alter_configs([res]).values():
            fut.result(30)
    env.produce(env.orders, b"s4|GENERAL", b'{"store": "s4", "type": "GENERAL", "pad": "'
                + b"x" * HUGE + b'"}')
    rng = random.Random(28)
    for topic in (env.orders, env.balances):
        for _ in range(8):
            env.produce(topic, rng.randbytes(rng.randint(1, 64)),
                        rng.randbytes(rng.randint(1, 4000)), partition=rng.randrange(P),
                        marker=rng.random() < 0.3)
    env.flush()
    env.sentinel()
    until(lambda: env.health()["skipped_records"]["changelog"] == 17 or env.health(), 60,
          "the random records to the balances changelog skipped")
    skipped = env.skips()
    assert skipped[("order_counts", "too_large")] == 1, skipped
    assert sum(skipped.values()) == 17, skipped
    _served_on(env, skipped)

    env.proc.stop()  # restarted, the node resumes past every poison record
    env.start()
    until(lambda: _exact(env), 60, "every good row served after the restart")
    _served_on(env, {})
