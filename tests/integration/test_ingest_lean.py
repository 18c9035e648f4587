"""The ingest as ``streamiq ingest`` runs it (its writes on the lean path) on Apache Kafka:
every refusal answered as before (bad token, oversized body, bad amount, bad order, bad
transfer), none of them produced; a deposit, a transfer and an order produced exactly
as answered (partition by murmur2 of the key, offset, position token), each answered on
the lean path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from procs import HTTP

from streamiq.auth import mint
from streamiq.kafka.partitioner import partition_for
from streamiq.serving.http.http_limits import MAX_BODY_BYTES

pytestmark = pytest.mark.integration

ORDER = {"order_id": "o-1", "store": "s-1", "type": "GENERAL", "amount": 12.5}


def records(bootstrap: str, topic: str, n: int) -> list[Any]:
    """The first ``n`` records of ``topic`` (every partition), read within a bound (each
    noting how many partitions the topic has: ``partitions``)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t-ingest-lean",
                  "enable.auto.commit": False})
    try:
        parts = c.list_topics(topic, timeout=30).topics[topic].partitions
        c.assign([TopicPartition(topic, p, 0) for p in parts])
        got: list[Any] = []
        for _ in range(300):
            if len(got) >= n:
                break
            msg = c.poll(0.1)
            if msg is not None and msg.error() is None:
                got.append((msg, len(parts)))
        return got
    finally:
        c.close()


def test_refusals_are_answered_as_before_and_writes_produced_as_answered(
        cluster: Any) -> None:
    cluster.auth = True
    port, _ = cluster.ingest("bank,orders")
    url = f"http://127.0.0.1:{port}"
    writer = cluster.headers
    reader = {"authorization": f"Bearer {mint(cluster.jwt_secret, scope='views:*')}"}

    def post(path: str, headers: dict[str, str], **kw: Any) -> tuple[int, dict[str, Any]]:
        r = HTTP.post(url + path, headers=headers, timeout=30, **kw)
        return r.status_code, r.json()

    assert post("/account/a-1?amount=5", {})[1]["code"] == "UNAUTHENTICATED"
    assert post("/transfer?from=a-1&to=b-2&amount=5", reader)[0] == 403
    assert post("/orders", reader, json=ORDER)[1]["code"] == "FORBIDDEN"
    status, big = post("/orders", {**writer, "content-type": "application/json"},
                       content=b" " * (MAX_BODY_BYTES + 1))
    assert (status, big["code"]) == (413, "BODY_TOO_LARGE")
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/account/a-1?amount=1.5", {}, "amount: "),
        ("/account/a-1?amount=1000000000001", {}, "amount: "),
        ("/orders", {"json": {**ORDER, "amount": True}}, "amount: "),
        ("/orders", {"content": b'{"order_id": "o-1", "store": "s-1", "type": "GENERAL", '
                                b'"amount": NaN}',
                     "headers": {"content-type": "application/json"}}, "amount: "),
        ("/orders", {"json": {**ORDER, "type": "OTHER"}}, "type: "),
        ("/orders", {"json": {**ORDER, "store": "s/1"}}, "store: "),
        ("/transfer?from=a-1&to=a-1&amount=5", {}, "to: must differ from from"),
        ("/transfer?from=a/1&to=b-2&amount=5", {}, "from: "),
        ("/transfer?from=a-1&amount=5", {}, "to: Field required"),
        ("/transfer?from=a-1&to=b-2&amount=-1000000000001", {}, "amount: "),
    ]
    for path, kw, field in cases:
        status, problem = post(path, {**writer, **kw.pop("headers", {})}, **kw)
        assert (status, problem["code"]) == (400, "BAD_REQUEST"), (path, problem)
        assert problem["detail"].startswith(field), (path, problem)
    assert records(cluster.bootstrap, cluster.topic("bank-transactions"), 1) == []
    assert records(cluster.bootstrap, cluster.topic("orders"), 1) == []

    answers = [post("/account/a-1?amount=5", writer)[1],
               post("/transfer?from=a-1&to=b-2&amount=3", writer)[1],
               post("/orders", writer, json=ORDER)[1]]
    bank = records(cluster.bootstrap, cluster.topic("bank-transactions"), 2)
    (order,) = records(cluster.bootstrap, cluster.topic("orders"), 1)
    for answer, (msg, partitions) in zip(answers, [*bank, order], strict=True):
        assert msg.key().decode() == answer["key"]
        assert json.loads(msg.value()) == answer["record"]
        assert (msg.partition(), msg.offset()) == (answer["partition"], answer["offset"])
        assert msg.partition() == partition_for(answer["key"], partitions)
        assert answer["position"] == f"{msg.topic()}:{msg.partition()}:{msg.offset()}"
    transfer = answers[1]
    assert transfer["record"]["to"] == "b-2" and transfer["key"] == "a-1"
    metrics = HTTP.get(url + "/metrics", timeout=30, headers=writer).text
    assert "streamiq_ingest_lean_answered_total 3.0" in metrics, metrics
