"""No poison pill, fuzzed through the real parts of ``streamiq up``.

Hypothesis drives a Kafka producer at every topic a part reads (the apps' input topics,
every changelog, the catalog, the membership topics, the progress topic): random bytes,
records near the broker's size limit, deep JSON, wrong schemas, rows in the wrong
partition, forged markers and catalog entries, replayed heartbeats. Queries stream
through every node meanwhile. Afterwards no part has exited, every key the fuzz could
not legitimately change answers exactly on every node, no answer was a 5xx, a position
token is still honoured, and the skip and dead-letter counts rose.

What the fuzz may not do: write a well-formed record a part would rightly accept for a
key the checks read (that is a write, not an attack; nothing can tell it apart). Keys
the fuzz uses start with ``f`` (accounts ``u-...`` and stores ``us-...`` are untouched),
except the wrong-partition rows, which name untouched keys on purpose.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from functools import partial
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from procs import HTTP
from updemo import CONVERGE_S, HEADERS, Up, balances_of, exact, post_json, same, until

from streamiq.kafka.partitioner import partition_for
from streamiq.views.base import MARKER_HEADER, MARKER_KEY

pytestmark = pytest.mark.integration

ACCOUNTS = {f"u-{i}": 10 * i + 7 for i in range(40)}
STORES = [f"us-{i}" for i in range(6)]
ORDERS = {f"{s}|{t}": 3 + i % 4 for i, (s, t) in
          enumerate((s, t) for s in STORES for t in ("GENERAL", "RESTAURANT"))}
HUGE = 1_000_000  # near the broker's 1 MiB limit
PRODUCER_MAX = 1_048_576


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    yield from Up(tmp_path_factory.mktemp("fuzz")).running()


# ---- what the fuzz writes -------------------------------------------------------------

def _deep(depth: int, kind: str) -> bytes:
    if kind == "list":
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


garbage = st.one_of(
    st.binary(max_size=200),
    st.builds(_deep, st.integers(200, 20_000), st.sampled_from(["list", "dict"])),
    st.just(b"\xff" * HUGE), st.just(b"{" * HUGE),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                 lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c,
                                                                     max_size=4),
                 max_leaves=20).map(lambda v: json.dumps(v).encode()),
)
keys = st.one_of(st.binary(min_size=1, max_size=40).filter(lambda b: not b.startswith(b"u")),
                 st.just(b"\xff\xfe"), st.just(b"f" * 2000))
ids = st.one_of(st.text(max_size=30).map(lambda s: "f" + s), st.integers(), st.none(),
                st.just(""), st.just("f" * 5000))
numbers = st.one_of(st.integers(), st.floats(), st.text(max_size=5), st.none(),
                    st.just(10**40), st.lists(st.integers(), max_size=2))


def _bank_value(account: Any, amount: Any, ts: Any) -> bytes:
    return json.dumps({"account": account, "amount": amount, "ts": ts}).encode()


def _order_value(oid: Any, store: Any, typ: Any, amount: Any, ts: Any) -> bytes:
    return json.dumps({"order_id": oid, "store": store, "type": typ, "amount": amount,
                       "ts": ts}).encode()


bank_input = st.builds(_bank_value, ids, numbers, numbers)
order_input = st.builds(_order_value, ids, ids, st.sampled_from(["GENERAL", "X", "", None]),
                        numbers, numbers)


class Topics:
    """The topics the parts read, found on the broker, and what may be written to each."""

    def __init__(self, bootstrap: str) -> None:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        md = admin.list_topics(timeout=30).topics
        self.partitions = {t: len(m.partitions) for t, m in md.items() if not t.startswith("__")}
        names = list(self.partitions)
        self.changelogs = sorted(t for t in names if t.endswith("-changelog"))
        self.catalog = next(t for t in names if t.endswith("-catalog"))
        self.progress = [t for t in names if t.endswith("-progress")]
        self.members = sorted(t for t in names if re.search(r"-members-\d+$", t))
        self.inputs = ["bank-transactions", "orders"]
        assert set(self.inputs) <= set(names), names
        assert self.changelogs and self.members, names


def _wrong_partition_row(topics: Topics, rng: random.Random) -> tuple[str, int, bytes, bytes]:
    """An untouched key's row with a huge value, in a partition the key does not map to."""
    topic = next(t for t in topics.changelogs if t.startswith("balances"))
    n = topics.partitions[topic]
    account = rng.choice(sorted(ACCOUNTS))
    right = partition_for(account.encode(), n)
    wrong = (right + 1 + rng.randrange(n - 1)) % n
    row = {"account": account, "balance": 10**9, "count": 1, "last_update": 0}
    return topic, wrong, account.encode(), json.dumps(row).encode()


def _bad_row(topic: str, value: Any) -> tuple[str, None, bytes, bytes]:
    """A well-keyed row (fresh key, its own partition) whose values do not fit the view."""
    if topic.startswith("balances"):
        return topic, None, b"f-row", json.dumps({"account": "f-row", "balance": value,
                                                  "count": [value], "last_update": "x"}).encode()
    return topic, None, b"fs-row|GENERAL", json.dumps(
        {"store": "fs-row", "type": "GENERAL", "count": value, "revenue": {"x": value},
         "window_start": "soon", "window_end": None}).encode()


def _forged_marker(offset: int) -> bytes:
    far = {str(p): offset for p in range(64)}
    return json.dumps({"batch_id": 10**9, "offsets": {"bank-transactions": far,
                                                     "orders": far}}).encode()


def _forged_view(partitions: int, name: str) -> bytes:
    return json.dumps({"version": 1, "name": name, "partitions": partitions,
                       "key_columns": [{"name": "k", "type": "string"}],
                       "value_columns": [{"name": "v", "type": "bigint"}],
                       "windowed": False, "global": False,
                       "changelog_topic": f"{name}-changelog"}).encode()


Record = tuple[str, int | None, bytes | None, bytes | None,
               list[tuple[str, str | bytes | None]] | None]


@st.composite
def records(draw: st.DrawFn, topics: Topics, replays: list[Record]) -> list[Record]:
    """A few records for one topic a part reads."""
    kind = draw(st.sampled_from(["input", "changelog", "catalog", "members", "progress",
                                 "replay"]))
    out: list[Record] = []
    for _ in range(draw(st.integers(1, 4))):
        if kind == "input":
            topic = draw(st.sampled_from(topics.inputs))
            value = draw(st.one_of(garbage, bank_input if topic == "bank-transactions"
                                   else order_input))
            key = draw(st.one_of(st.none(), keys))
            out.append((topic, None, key, value, None))
        elif kind == "changelog":
            topic = draw(st.sampled_from(topics.changelogs))
            shape = draw(st.sampled_from(["garbage", "schema", "partition", "marker"]))
            if shape == "garbage":
                out.append((topic, draw(st.integers(0, topics.partitions[topic] - 1)),
                            draw(keys), draw(garbage), None))
            elif shape == "schema":
                out.append((*_bad_row(topic, draw(numbers)), None))
            elif shape == "partition":
                out.append((*_wrong_partition_row(topics, random.Random(draw(st.integers()))),
                            None))
            else:
                value = draw(st.one_of(st.just(_forged_marker(10**12)), garbage))
                for p in range(topics.partitions[topic]):
                    out.append((topic, p, MARKER_KEY, value, [(MARKER_HEADER, b"1")]))
        elif kind == "catalog":
            name = draw(st.sampled_from(["fview", "balances", "order_counts"]))
            value = draw(st.one_of(garbage, st.builds(
                _forged_view, st.sampled_from([10**6, 10**9, 0, -1, 5]), st.just(name))))
            out.append((topics.catalog, None, name.encode(), value, None))
        elif kind == "members":
            value = draw(st.one_of(garbage, st.just(json.dumps(
                {"endpoint": "127.0.0.1:1", "ts": time.time() * 1000, "views": {}}).encode())))
            out.append((draw(st.sampled_from(topics.members)), None, draw(keys), value, None))
        elif kind == "progress" and topics.progress:
            out.append((topics.progress[0], None, draw(keys), draw(garbage), None))
        elif replays:
            out.append(draw(st.sampled_from(replays)))
    return out


def _captured_heartbeats(bootstrap: str, topics: Topics) -> list[Record]:
    """Real signed heartbeats from the members topics, to replay later."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fuzz-{time.time()}",
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(t, 0, 0) for t in topics.members])
        out: list[Record] = []
        deadline = time.monotonic() + 30
        while len(out) < 20 and time.monotonic() < deadline:
            m = c.poll(1)
            if m is None or m.error() is not None:
                continue
            topic, headers = m.topic(), m.headers()
            if topic is not None and isinstance(headers, list) and headers:
                out.append((topic, m.partition(), m.key(), m.value(), headers))
        return out
    finally:
        c.close()


# ---- what is checked ------------------------------------------------------------------

class Readers(threading.Thread):
    """Untouched keys through every node, on and on: every status and any wrong value."""

    def __init__(self, ports: list[int]) -> None:
        super().__init__(daemon=True)
        self.ports = ports
        self.statuses: Counter[int] = Counter()
        self.bad: list[tuple[int, str, int, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        rng = random.Random(7)
        with httpx.Client(headers=HEADERS, timeout=30) as c:
            while not self.stop.is_set():
                port = rng.choice(self.ports)
                account = rng.choice(sorted(ACCOUNTS))
                paths = [f"/account/{account}",
                         "/v1/views/order_counts/aggregate?group_by=type&agg=sum(count)",
                         "/v1/views/balances/scan?prefix=u-&limit=1000"]
                path = rng.choice(paths)
                try:
                    r = c.get(f"http://127.0.0.1:{port}{path}")
                except httpx.HTTPError as exc:
                    self.bad.append((port, path, 0, repr(exc)))
                    continue
                self.statuses[r.status_code] += 1
                if r.status_code >= 500 or (path.startswith("/account") and (
                        r.status_code != 200
                        or r.json()["value"]["balance"] != ACCOUNTS[account])):
                    self.bad.append((port, path, r.status_code, r.text[:300]))
                time.sleep(0.02)


def _counted(up: Up) -> dict[str, float]:
    """Every skip and dead-letter count the parts export, summed per metric name."""
    out: defaultdict[str, float] = defaultdict(float)
    urls = [f"http://127.0.0.1:{p}/metrics" for p in up.node_ports]
    urls.append(f"http://127.0.0.1:{up.metrics_port}/metrics")
    for url in urls:
        text = HTTP.get(url, headers=HEADERS, timeout=10).text
        for m in re.finditer(r"^(\w*(?:skipped|dead_letter|deadletter|refused)\w*)"
                             r"(?:\{[^}]*\})? (\S+)$", text, re.MULTILINE):
            out[m.group(1)] += float(m.group(2))
    return dict(out)


def _orders_of(port: int) -> dict[str, int]:
    with httpx.Client(headers=HEADERS, base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
        body = post_json(c, "/v1/views/order_counts/keys", json={"keys": sorted(ORDERS)})
    return {r["key"]: r["value"]["count"] for r in body["results"] if r["found"]}


def _orders_exact(port: int) -> bool | str:
    return same(_orders_of(port), ORDERS)


def test_no_record_on_any_topic_stops_a_part(up: Up) -> None:
    bootstrap = f"127.0.0.1:{up.broker_port}"
    with httpx.Client(headers=HEADERS, base_url=f"http://127.0.0.1:{up.ingest_port}",
                      timeout=30) as c:
        for account, amount in ACCOUNTS.items():
            post_json(c, f"/account/{account}", params={"amount": amount})
        for key, count in ORDERS.items():
            store, typ = key.split("|")
            for i in range(count):
                post_json(c, "/orders", json={"order_id": f"{store}-{typ}-{i}", "store": store,
                                              "type": typ, "amount": 1.5})
    for port in up.node_ports:
        until(partial(exact, port, ACCOUNTS), CONVERGE_S, "balances visible")
        until(partial(_orders_exact, port), CONVERGE_S, "orders visible")

    topics = Topics(bootstrap)
    replays = _captured_heartbeats(bootstrap, topics)
    assert replays, "no signed heartbeat captured to replay"
    parts = {pid: argv for pid, argv in up.tree().items()  # the parts, not their workers
             if argv[1:3] == ["-m", "streamiq"] or "kafka.Kafka" in argv}
    assert len(parts) == 3 + len(up.node_ports), parts  # broker, ingest, pipeline, nodes
    before = _counted(up)
    offset = len(up.log())
    readers = Readers(up.node_ports)
    readers.start()
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": PRODUCER_MAX,
                         "linger.ms": 5, "enable.idempotence": False, "acks": "all"})
    sent: Counter[str] = Counter()

    def delivered(err: Any, msg: Any) -> None:
        sent["ok" if err is None else str(err.name())] += 1

    @settings(max_examples=150, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(batch=records(topics, replays))
    def fuzz(batch: list[Record]) -> None:
        for topic, partition, key, value, headers in batch:
            kw: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
            if partition is not None:
                kw["partition"] = partition
            if headers:
                kw["headers"] = headers
            producer.produce(topic, **kw)
            producer.poll(0)

    try:
        fuzz()
        assert producer.flush(120) == 0
        # a position token is still honoured: markers claiming offsets far past the
        # input's end must not make it "reached" before the write is reflected
        with httpx.Client(headers=HEADERS, timeout=60) as c:
            for i in range(6):
                w = post_json(c, f"http://127.0.0.1:{up.ingest_port}/account/f-ryw-{i}",
                              params={"amount": 5})
                for port in up.node_ports:
                    r = c.get(f"http://127.0.0.1:{port}/account/f-ryw-{i}",
                              params={"position": w["position"], "wait_ms": 60_000})
                    assert r.status_code == 200 and r.json()["value"]["balance"] == 5, \
                        (port, i, r.status_code, r.text[:300])
        time.sleep(5)  # let the last fuzzed records reach every part while reads go on
    finally:
        readers.stop.set()
        readers.join(60)
    print(f"\nfuzz: produced {dict(sent)}; reads {dict(readers.statuses)}; "
          f"{len(readers.bad)} bad")

    assert sent["ok"] > 100, sent
    gone = {pid: argv for pid, argv in parts.items() if pid not in up.alive()}
    assert not gone, f"parts exited during the fuzz: {gone}\n{up.log()[offset:][-6000:]}"
    assert not re.search(r"^streamiq: \S+ exited", up.log()[offset:], re.MULTILINE), \
        up.log()[offset:][-6000:]
    assert readers.bad == [], readers.bad[:10]
    assert readers.statuses[200] > 100, readers.statuses
    for port in up.node_ports:
        assert same(balances_of(port, sorted(ACCOUNTS)), ACCOUNTS) is True, port
        assert same(_orders_of(port), ORDERS) is True, port
        r = HTTP.get(f"http://127.0.0.1:{port}/health", timeout=10)
        assert r.status_code == 200, (port, r.text)
    def rose() -> dict[str, float]:
        after = _counted(up)
        return {k: after.get(k, 0) - before.get(k, 0) for k in after
                if after.get(k, 0) > before.get(k, 0)}

    # the dead letters are counted by their own micro-batch query (every 10 s, beside the
    # views' queries): bounded wait for its batches to report, not a fixed sleep
    until(lambda: any("dead" in k for k in rose()), CONVERGE_S,
          "dead letters counted")
    counted = rose()
    print(f"fuzz: counts that rose {counted}")
    assert any("dead" in k for k in counted), (before, counted)
    assert any("skipped" in k or "refused" in k for k in counted), (before, counted)
