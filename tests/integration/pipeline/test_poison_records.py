"""No input record stops the pipeline (issue 28), through the real broker and pipeline.

One pipeline run (``--app bank``) reads, interleaved with good transactions: a key that
is not UTF-8 (with a bad value, and with a good one), a value past the dead-letter
topic's size limit (the input topic's limit raised so Kafka takes it), deeply nested
JSON, invalid UTF-8 inside a JSON string, and wrong-schema values (wrong type, missing
field, non-object JSON, JSON null, empty value, tombstone). Before, the first two made
the dead-letter write raise (UnicodeDecodeError, MSG_SIZE_TOO_LARGE) and the third the
sink's (a key that is not UTF-8): the pipeline crash-looped. Now each bad record is one
dead letter naming its topic, partition and offset, the good ones are all in the view,
the dead-letter count rises, and the pipeline keeps running.
"""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from pipeline_harness import (
    changelog_state,
    dead_letter_docs,
    input_ends,
    read_topic,
    wait_caught_up,
)
from procs import SHORT_BATCHES
from updemo import metric

from streamiq.pipeline.deadletter import DEAD_LETTER_TOPIC, MAX_VALUE_BYTES

pytestmark = pytest.mark.integration

NOW = int(time.time() * 1000)
BIG = 2_000_000  # bytes: above the dead-letter topic's 1 MB, below the input's 4 MB
BAD_KEY = b"\xff\xfe\x80bad-key"


def _txn(account: str, amount: int, i: int) -> bytes:
    return json.dumps({"account": account, "amount": amount, "ts": NOW + i}).encode()


def _nested(depth: int) -> bytes:
    return (b'{"account": ' + b'{"a": ' * depth + b"1" + b"}" * depth
            + b', "amount": 1, "ts": 1}')


#: (key, value, reason): the bad records, each dead-lettered once
BAD: list[tuple[bytes | None, bytes | None, str]] = [
    (BAD_KEY, b'{"account": "acct-1", "amount": "ten", "ts": 1}',
     "wrong type for field(s): amount"),
    (b"acct-2", b'{"account": "acct-2", "amount": "' + b"9" * BIG + b'", "ts": 1}',
     f"value too large (over {MAX_VALUE_BYTES} bytes)"),
    (b"acct-3", _nested(5000), "invalid JSON (not a JSON object)"),
    (b"acct-3", b'{"account": "acct-\xff\xfe", "amount": 1, "ts": 1}',
     "value is not valid UTF-8"),
    (b"acct-0", b'{"account": "acct-0", "ts": 1}', "missing field(s): amount"),
    (b"acct-1", b'[1, 2, {"account": "acct-1"}]', "invalid JSON (not a JSON object)"),
    (b"acct-1", b'"acct-1"', "invalid JSON (not a JSON object)"),
    (b"acct-2", b"null", "invalid JSON (not a JSON object)"),
    (b"acct-2", b"", "invalid JSON (not a JSON object)"),
    (b"acct-3", None, "null value"),
]
#: good records: (key, value); one has a key that is not UTF-8 (carried as bytes), one
#: has extra fields (ignored)
GOOD: list[tuple[bytes, bytes]] = [
    (f"acct-{i % 4}".encode(), _txn(f"acct-{i % 4}", (i * 37) % 101 - 40, i)) for i in range(40)
] + [(BAD_KEY, _txn("acct-0", 1000, 50)),
     (b"acct-3", json.dumps({"account": "acct-3", "amount": 7, "ts": NOW + 51,
                             "extra": {"deep": [1, {"x": None}]}}).encode())]


def _raise_limit(bootstrap: str, topic: str, limit: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry("max.message.bytes", str(limit),
                    incremental_operation=AlterConfigOpType.SET)])
    for fut in admin.incremental_alter_configs([res]).values():
        fut.result(30)


def _produce(bootstrap: str, topic: str, records: list[tuple[Any, Any]]
             ) -> list[tuple[int, int]]:
    """Produce in order, one at a time; the (partition, offset) of each."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                  "message.max.bytes": 4 * BIG, "partitioner": "murmur2_random"})
    where: list[Any] = [None] * len(records)

    def done(i: int) -> Any:
        def cb(err: Any, msg: Any) -> None:
            where[i] = err if err is not None else (msg.partition(), msg.offset())
        return cb

    for i, (k, v) in enumerate(records):
        p.produce(topic, key=k, value=v, on_delivery=done(i))
    assert p.flush(30) == 0
    assert all(isinstance(w, tuple) for w in where), where
    return where


def _raw(doc: dict[str, Any], field: str) -> bytes | None:
    text = doc[field]
    if text is None:
        return None
    return base64.b64decode(text) if doc[f"{field}_encoding"] == "base64" else text.encode()


def test_no_input_record_stops_the_pipeline(cluster: Any, bootstrap: str) -> None:
    pipe = cluster.pipeline("bank", extra=SHORT_BATCHES)  # markers every 10 s
    topic, changelog = cluster.topic("bank-transactions"), cluster.topic("balances-changelog")
    _raise_limit(bootstrap, topic, 4 * BIG)
    before = metric(cluster.pipeline_metrics, "streamiq_pipeline_dead_letters_total")

    records: list[tuple[Any, Any]] = []
    which: list[int | None] = []  # the index in BAD of each record (None: a good one)
    for i, good in enumerate(GOOD):  # the bad ones spread among the good
        records.append(good)
        which.append(None)
        if i % 4 == 3 and i // 4 < len(BAD):
            records.append(BAD[i // 4][:2])
            which.append(i // 4)
    assert sorted(j for j in which if j is not None) == list(range(len(BAD)))
    positions = _produce(bootstrap, topic, records)
    bad_at = {at: BAD[j] for at, j in zip(positions, which, strict=True) if j is not None}
    ends = {str(p): input_ends(bootstrap, topic).get(str(p), 0) for p in range(3)}
    msgs = wait_caught_up(bootstrap, changelog, ends, topic, 3, timeout=240)

    want: dict[str, dict[str, int]] = {}
    for _, good_value in GOOD:
        t = json.loads(good_value)
        w = want.setdefault(t["account"], {"balance": 0, "count": 0, "last_update": 0})
        w["balance"] += t["amount"]
        w["count"] += 1
        w["last_update"] = max(w["last_update"], t["ts"])
    last, _ = changelog_state(msgs)
    assert {k: {c: v[c] for c in want[k]} for k, v in last.items() if k in want} == want
    assert set(last) == set(want)

    docs = dead_letter_docs(bootstrap, cluster.topic(DEAD_LETTER_TOPIC), len(BAD), 120)
    got = {(d["partition"], d["offset"]): d for d in docs}
    assert len(docs) == len(got) == len(BAD), [d["reason"] for d in docs]
    assert set(got) == set(bad_at)
    for at, (key, value, reason) in bad_at.items():
        d = got[at]
        assert (d["topic"], d["view"], d["reason"]) == (topic, "balances", reason), d
        assert _raw(d, "key") == key
        assert d["value_bytes"] == len(value or b"")
        kept = _raw(d, "value")
        assert kept == value if not d["truncated"] else value and value.startswith(kept or b"")
    assert got[next(a for a, b in bad_at.items() if len(b[1] or b"") > BIG)]["truncated"]
    big_dead = [m for m in read_topic(bootstrap, cluster.topic(DEAD_LETTER_TOPIC))
                if len(m.value()) > 1_000_000]
    assert big_dead == []

    deadline = time.monotonic() + 30  # the listener counts after the batch's progress
    while metric(cluster.pipeline_metrics, "streamiq_pipeline_dead_letters_total") \
            < before + len(BAD) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert metric(cluster.pipeline_metrics, "streamiq_pipeline_dead_letters_total") \
        == before + len(BAD)
    assert metric(cluster.pipeline_metrics, "streamiq_pipeline_dead_letters_written_total") \
        == len(BAD)
    assert pipe.alive(), pipe.log()[-4000:]
    assert "query stopped" not in pipe.log() and " terminated: " not in pipe.log()
