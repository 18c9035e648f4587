"""The materializer fails closed: bad changelog records are skipped and counted; a crash
empties what the node holds until the restarted loop has restored from its checkpoints.
Kafka is faked (a consumer over an in-memory log); the stores are in memory, as a node's
with --store memory (tests/unit/state holds them to what RocksDB does)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError
from fakes import Message
from faultnode import KeyFault

from streamiq.config import Settings
from streamiq.kafka.partitioner import partition_for
from streamiq.routing.membership import KafkaMembership
from streamiq.routing.router import Router
from streamiq.serving.changelog.discovery import Discovery
from streamiq.serving.changelog.materializer import Materializer, PartitionState
from streamiq.serving.cluster.coordinator import Coordinator
from streamiq.serving.node import Node, Parts
from streamiq.state import open_store
from streamiq.supervise import Supervisor
from streamiq.views.bank import BALANCES
from streamiq.views.base import MARKER_HEADER, MARKER_KEY, load_app, store_key
from streamiq.views.orders import ORDER_COUNTS_1M
from streamiq.views.rows import RowCheck

TOPIC = {"balances": "cl-b", "order_counts_1m": "cl-w"}
SEAM = "streamiq.serving.changelog.materializer.before_apply"  # where tests install a fault



class Eof(Message):
    """librdkafka's end-of-partition event (enable.partition.eof): a message without
    key, value or headers whose error is _PARTITION_EOF."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        super().__init__(topic, partition, offset, None, None)

    def error(self) -> Any:
        return KafkaError(KafkaError._PARTITION_EOF)


class Log:
    """An in-memory changelog: topic -> partition -> records."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, int], list[Message]] = {}
        self.first_fetch_polls = 0  # polls before a newly assigned partition's first answer
        #: how far the cached end lags the records just handed over (librdkafka's broker
        #: thread stores a fetch's end after the application may already hold its records)
        self.cached_lag = 0

    def append(self, topic: str, p: int, key: bytes | None, value: bytes | None,
               marker: bool = False) -> None:
        recs = self.records.setdefault((topic, p), [])
        recs.append(Message(topic, p, len(recs), key, value,
                            [(MARKER_HEADER, b"1")] if marker else None))


def _row(account: str, balance: int) -> bytes:
    return json.dumps({"account": account, "balance": balance, "count": 1,
                       "last_update": 0}).encode()


@pytest.fixture
def fake_kafka(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Log, list[Any]]]:
    """confluent_kafka.Consumer replaced by a consumer of an in-memory Log."""
    import confluent_kafka

    log = Log()
    consumers: list[Any] = []

    class FakeConsumer:
        def __init__(self, conf: dict[str, Any]) -> None:
            self.pos: dict[tuple[str, int], int] = {}
            self.eof: dict[tuple[str, int], int] = {}  # where the end was last told
            #: as librdkafka: the end each partition's last fetch answered (kept across
            #: an unassign), and polls left before a newly assigned one's first answer
            self.cached: dict[tuple[str, int], int] = {}
            self.in_flight: dict[tuple[str, int], int] = {}
            self.conf = conf
            consumers.append(self)

        def incremental_assign(self, tps: list[Any]) -> None:
            for tp in tps:
                self.pos[(tp.topic, tp.partition)] = max(tp.offset, 0)
                self.eof.pop((tp.topic, tp.partition), None)
                self.in_flight[(tp.topic, tp.partition)] = log.first_fetch_polls

        def incremental_unassign(self, tps: list[Any]) -> None:
            for tp in tps:
                self.pos.pop((tp.topic, tp.partition), None)

        def consume(self, n: int, timeout: float) -> list[Message]:
            out: list[Message] = []
            for tp, at in self.pos.items():
                if self.in_flight.get(tp):
                    self.in_flight[tp] -= 1
                    continue
                got = log.records.get(tp, [])[at:at + n - len(out)]
                self.pos[tp] = at + len(got)
                out += got
                end = len(log.records.get(tp, []))
                self.cached[tp] = max(end - log.cached_lag, 0)
                if self.conf.get("enable.partition.eof") and self.pos[tp] == end \
                        and self.eof.get(tp) != end:
                    self.eof[tp] = end
                    out.append(Eof(*tp, end))
            if not out:
                time.sleep(0.002)  # as a real consumer's poll timeout would (pacing)
            return out

        def poll(self, timeout: float) -> Message | None:
            got = self.consume(1, timeout)
            return got[0] if got else None

        def get_watermark_offsets(self, tp: Any, cached: bool = False,
                                  timeout: float = 1) -> tuple[int, int]:
            if cached:
                return 0, self.cached.get((tp.topic, tp.partition), -1001)
            return 0, len(log.records.get((tp.topic, tp.partition), []))

        def seek(self, tp: Any) -> None:
            self.pos[(tp.topic, tp.partition)] = max(tp.offset, 0)

        def close(self) -> None:
            pass

    monkeypatch.setattr(confluent_kafka, "Consumer", FakeConsumer)
    yield log, consumers


#: the input partitions there are, and their ends, as the fake Kafka reports them
INPUT_ENDS = {("in", 0): 10, ("in", 1): 0}


def _ends(tps: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
    return {tp: INPUT_ENDS.get(tp) for tp in tps}


def _materializer(tmp_path: Path, supervisor: Supervisor | None = None,
                  partitions: dict[str, int] | None = None) -> Materializer:
    views = {"balances": BALANCES, "order_counts_1m": ORDER_COUNTS_1M}
    stores = {name: open_store("memory", tmp_path / name) for name in views}
    return Materializer({}, views, stores, TOPIC, supervisor, partitions=partitions,
                        input_ends=_ends)


def _wait(cond: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_undecodable_records_are_skipped_counted_and_the_offset_advances(
        tmp_path: Path) -> None:
    m = _materializer(tmp_path)
    log = Log()
    b, w = TOPIC["balances"], TOPIC["order_counts_1m"]
    log.append(b, 0, None, b"{not json", marker=True)  # bad marker JSON
    log.append(b, 0, None, json.dumps({"offsets": {"in": {"0": "x"}}}).encode(), marker=True)
    log.append(b, 0, None, _row("nokey", 1))  # a row without a key
    log.append(b, 0, b"a1", _row("a1", 1))
    log.append(b, 0, None, json.dumps({"offsets": {"in": {"0": 7}}}).encode(), marker=True)
    window = {"store": "s", "type": "t", "count": 1}
    log.append(w, 0, b"s|t", json.dumps({**window, "window_start": "soon"}).encode())
    log.append(w, 0, b"s|t", json.dumps({**window}).encode())  # no window_start
    log.append(w, 0, b"s|t", json.dumps({**window, "window_start": 1.5}).encode())
    log.append(w, 0, b"s|t", json.dumps({**window, "window_start": 1 << 70}).encode())
    log.append(w, 0, b"s|t", b"[1, 2]")  # not an object
    log.append(w, 0, b"\xff\xfe", json.dumps({**window, "window_start": 0}).encode())
    log.append(w, 0, b"s|t", None)  # a windowed row without a value
    log.append(w, 0, b"s|t", json.dumps({**window, "window_start": 60_000}).encode())
    for view in ("balances", "order_counts_1m"):
        m.states[(view, 0)] = PartitionState()
    m.apply(log.records[(b, 0)] + log.records[(w, 0)])
    assert m.skipped == 3 + 7
    assert m.states[("balances", 0)].offset == 5  # past every record, bad ones too
    assert m.states[("balances", 0)].position == {"in": {0: 7}}
    assert m.states[("order_counts_1m", 0)].offset == 8
    assert m.stores["balances"].get(0, b"a1") == _row("a1", 1)
    assert m.stores["balances"].checkpoint(0).offset == 5  # type: ignore[union-attr]
    assert [k for k, _ in m.stores["order_counts_1m"].scan(0)] == [store_key("s|t", 60_000)]
    # later good records still apply
    log.append(b, 0, b"a2", _row("a2", 2))
    m.apply(log.records[(b, 0)][5:])
    assert m.stores["balances"].get(0, b"a2") == _row("a2", 2)
    assert m.skipped == 10 and m.states[("balances", 0)].offset == 6


def test_a_row_that_is_not_one_json_object_is_skipped_so_answers_cannot_be_injected(
        tmp_path: Path) -> None:
    """Answers paste stored rows into their JSON: a value that would break out of its
    place (trailing content, not an object, NaN, invalid UTF-8) is never stored."""
    m = _materializer(tmp_path)
    log = Log()
    b = TOPIC["balances"]
    for bad in (b'1,"served_by":"evil"', b'{"balance":1},"role":"active"', b"[1]",
                b'{"balance": NaN}', b'{"balance": 1e999}', b'{"account":"\xff"}',
                b'{"account":"a"} {"x":1}', b""):
        log.append(b, 0, b"evil", bad)
    log.append(b, 0, b"a1", _row("a1", 1))
    m.states[("balances", 0)] = PartitionState()
    m.apply(log.records[(b, 0)])
    assert m.skipped == 8
    assert m.stores["balances"].get(0, b"evil") is None
    assert m.stores["balances"].get(0, b"a1") == _row("a1", 1)  # stored as it came
    assert m.states[("balances", 0)].offset == 9


def test_poison_records_are_skipped_by_reason_and_never_stop_the_loop(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: deep JSON, a row in the wrong partition, a row off the schema, a marker
    claiming offsets past the input's end, huge and random records: each is skipped and
    counted by reason, the offset advances and the good rows around them are stored."""
    m = _materializer(tmp_path, partitions={"balances": 3, "order_counts_1m": 3})
    b = TOPIC["balances"]
    good = partition_for(b"a1", 3)
    log = Log()

    def marker(offsets: Any) -> None:
        raw = offsets if isinstance(offsets, bytes) else json.dumps(offsets).encode()
        log.append(b, good, MARKER_KEY, b'{"offsets": ' + raw + b"}", True)

    marker({"in": {"0": 5}})
    log.append(b, good, b"a1", _row("a1", 1))
    marker(b"[" * 50_000 + b"]" * 50_000)  # a RecursionError in json.loads before
    log.append(b, good, b"a1", b"[" * 50_000 + b"]" * 50_000)
    log.append(b, (good + 1) % 3, b"a1", _row("a1", 666))  # a1 is not in that partition
    log.append(b, good, b"a1", json.dumps({"account": "a1", "balance": "x"}).encode())
    marker({"in": {"0": 10**12}})  # far past the input's end (10)
    marker({"in": {"9": 1}})  # no such input partition
    log.append(b, good, b"a1", b'{"account":"a1","pad":"' + b"x" * (5 << 20) + b'"}')
    log.append(b, good, bytes(range(256)), bytes(range(256)) * 8)
    gone = next(k for k in (f"k{i}".encode() for i in range(99)) if partition_for(k, 3) == good)
    log.append(b, good, gone, None)  # a tombstone: a row is deleted, no skip
    for p in range(3):
        m.states[("balances", p)] = PartitionState()
    m.apply([r for recs in log.records.values() for r in recs])
    assert m.skips == {("balances", "bad_marker"): 1,
                       ("balances", "not_json"): 1, ("balances", "wrong_partition"): 1,
                       ("balances", "wrong_type"): 1, ("balances", "marker_beyond_end"): 1,
                       ("balances", "marker_unknown_partition"): 1,
                       ("balances", "too_large"): 1, ("balances", "bad_key"): 1}
    st = m.states[("balances", good)]
    assert st.offset == len(log.records[(b, good)]) and st.position == {"in": {0: 5}}
    assert m.stores["balances"].get(good, b"a1") == _row("a1", 1)
    assert m.stores["balances"].checkpoint(good).position == {"in": {0: 5}}  # type: ignore[union-attr]
    assert list(m.stores["balances"].scan((good + 1) % 3)) == []

    # a record that breaks the decoding in a way no check foresaw is skipped too
    def broken(*_: Any) -> Any:
        raise KeyError("surprise")

    monkeypatch.setattr(RowCheck, "__call__", broken)
    log.append(b, good, b"a1", _row("a1", 2))
    m.apply(log.records[(b, good)][-1:])
    assert m.skips[("balances", "undecodable")] == 1
    assert st.offset == len(log.records[(b, good)])


@contextlib.contextmanager
def _poisoned(tmp_path: Path, log: Log, sup: Supervisor) -> Iterator[Materializer]:
    """A running materializer of balances 0 that, once restored, meets a ``poison``
    record followed by an update of a1 (balance 100); stopped on exit."""
    m = _materializer(tmp_path, sup)
    m.want({("balances", 0)})
    m.start()
    try:
        _wait(lambda: m.states.get(("balances", 0), PartitionState()).restored, "restored")
        log.append(TOPIC["balances"], 0, b"poison", _row("poison", 9))
        log.append(TOPIC["balances"], 0, b"a1", _row("a1", 100))
        yield m
    finally:
        m.stop()


def test_a_partition_held_again_restores_to_its_end_not_to_a_stale_cached_one(
        tmp_path: Path, fake_kafka: Any) -> None:
    """librdkafka keeps a partition's cached end across an unassign; until the first
    fetch after it is assigned again answers, that end is stale. A restore target taken
    from it would call the partition restored while records written since are unread."""
    log, _ = fake_kafka
    log.first_fetch_polls = 200  # a slow first fetch: a window the old target fell into
    b, held = TOPIC["balances"], ("balances", 0)
    for i in range(3):
        log.append(b, 0, f"a{i}".encode(), _row(f"a{i}", i))
    m = _materializer(tmp_path)
    m.want({held})
    m.start()
    try:
        _wait(lambda: m.states.get(held, PartitionState()).restored, "restored")
        assert m.states[held].offset == 3
        m.want(set())
        _wait(lambda: held not in m.states, "released")
        for i in range(5):  # written while another node held it
            log.append(b, 0, f"a{i}".encode(), _row(f"a{i}", 10 + i))
        m.want({held})
        _wait(lambda: m.states.get(held, PartitionState()).restored, "restored again")
        assert m.states[held].offset == 8  # not 3: restored means caught up to the end
        assert m.stores["balances"].get(0, b"a4") == _row("a4", 14)
    finally:
        m.stop()


def test_a_partition_at_its_changelogs_end_is_restored_without_waiting_for_a_fetch(
        tmp_path: Path, fake_kafka: Any) -> None:
    """A restart, a copy from a peer, an empty partition: a checkpoint already at the
    changelog's end (asked of the broker) is restored at once, where a fetch at the end
    is held by the broker for fetch.wait.max.ms before it says so; one behind its end
    still waits for its records."""
    log, _ = fake_kafka
    b = TOPIC["balances"]
    for i in range(3):
        log.append(b, 0, f"a{i}".encode(), _row(f"a{i}", i))
    m = _materializer(tmp_path)
    m.want({("balances", 0)})
    m.start()
    try:
        _wait(lambda: m.states.get(("balances", 0), PartitionState()).restored, "restored")
    finally:
        m.stop()
    log.first_fetch_polls = 10**9  # from now on no fetch answers
    log.append(b, 2, b"a9", _row("a9", 9))
    again = Materializer({}, m.views, m.stores, TOPIC, input_ends=_ends)
    again.want({("balances", 0), ("balances", 1), ("balances", 2)})  # 1 empty, 2 behind
    again.start()
    try:
        _wait(lambda: all(again.states.get(("balances", p), PartitionState()).restored
                          for p in (0, 1)), "restored at the end")
        assert again.states[("balances", 0)].offset == 3 and again.read["balances"] == 0
        assert not again.states[("balances", 2)].restored  # its record is not read yet
    finally:
        again.stop()


def test_a_cached_end_behind_the_records_handed_over_rebuilds_nothing(
        tmp_path: Path, fake_kafka: Any) -> None:
    """librdkafka may hand over a fetch's records before it stores that fetch's end: the
    cached end is then one fetch behind the offset applied. That is no shorter log: the
    partition keeps its rows and its subscribers (it was rebuilt from the log, and each
    subscription ended, twice a minute under 300 writes a second)."""
    log, _ = fake_kafka
    log.cached_lag = 1
    b, held = TOPIC["balances"], ("balances", 0)
    m = _materializer(tmp_path)
    m.want({held})
    m.start()
    try:
        for i in range(20):
            log.append(b, 0, f"a{i}".encode(), _row(f"a{i}", i))
        _wait(lambda: m.states.get(held, PartitionState()).offset == 20, "applied")
        time.sleep(0.2)  # the loop looks at the lagging end some more times
        assert m.stores["balances"].get(0, b"a0") == _row("a0", 0)  # not dropped
        assert m.read["balances"] == 20, m.read  # each record read once: no rebuild
    finally:
        m.stop()


def test_a_crash_restarts_from_the_checkpoints(tmp_path: Path, fake_kafka: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    log, consumers = fake_kafka
    for i in range(3):
        log.append(TOPIC["balances"], 0, f"a{i}".encode(), _row(f"a{i}", i))
    monkeypatch.setattr(SEAM, KeyFault(b"poison", 2))  # raises twice, then applies
    sup = Supervisor(restarts=3, backoff_s=0.001)
    with _poisoned(tmp_path, log, sup) as m:
        _wait(lambda: m.stores["balances"].get(0, b"a1") == _row("a1", 100), "a1 updated")
        _wait(lambda: m.states.get(("balances", 0), PartitionState()).restored, "restored")
    assert sup.faults == {"materializer": 2} and sup.failed is None
    assert len(consumers) == 3  # each restart is a fresh consumer
    assert m.stores["balances"].get(0, b"poison") == _row("poison", 9)
    assert m.states[("balances", 0)].offset == 5


def test_a_materializer_that_cannot_recover_holds_nothing(tmp_path: Path, fake_kafka: Any,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    log, _ = fake_kafka
    log.append(TOPIC["balances"], 0, b"a1", _row("a1", 1))
    monkeypatch.setattr(SEAM, KeyFault(b"poison"))  # every time
    held_at_fatal: list[dict[Any, Any]] = []
    sup = Supervisor(on_fatal=lambda n, e: held_at_fatal.append(dict(m.states)), restarts=2,
                     backoff_s=0.001)
    with _poisoned(tmp_path, log, sup) as m:
        _wait(lambda: sup.failed is not None, "giving up")
    assert held_at_fatal == [{}] and m.states == {}
    assert sup.faults == {"materializer": 3}
    assert m.stores["balances"].get(0, b"a1") == _row("a1", 1)  # frozen: never served


def _node(tmp_path: Path) -> tuple[Node, Coordinator]:
    """A one-node cluster (not started) holding balances 0..2, restored and current."""
    settings = Settings(app="bank", port=9101)
    sup = Supervisor()
    materializer = _materializer(tmp_path, sup)
    for p in range(3):
        materializer.states[("balances", p)] = PartitionState(
            offset=5, high_watermark=5, target=5, restored=True)
    partitions = {"balances": 3}
    reports: list[Node] = []
    membership = KafkaMembership({}, "t", settings.endpoint, lambda: reports[0].report(),
                                 supervisor=sup)
    discovery = Discovery({}, "catalog", lambda spec: None, sup)  # not started
    parts = Parts(partitions, {"balances": TOPIC["balances"]}, materializer.stores,
                  materializer, membership, Router(membership, partitions, 1), discovery)
    node = Node(settings, load_app("bank"), parts, sup)
    reports.append(node)
    node.assigning = True
    node.wanted = {("balances", p) for p in range(3)}
    return node, Coordinator(node)


def test_node_fails_closed_while_the_materializer_is_down(tmp_path: Path) -> None:
    node, co = _node(tmp_path)
    assert node.ready() and node.holds("balances", 0)
    assert co.placement.active_here("balances", 0, 10)
    node.materializer.forget()  # what the loop does when it raises, before restarting
    assert not node.ready()
    assert not node.holds("balances", 0) and node.lag("balances", 0) == -1
    assert not co.placement.active_here("balances", 0, 10)  # no local answer from frozen rows
    assert node.report() == {}  # heartbeats say nothing is held: peers route elsewhere
    # its own routing entry follows within the membership's self-report TTL (until then a
    # local attempt is refused by holds() above, and the next replica is asked)
    router = node.router
    _wait(lambda: router.replicas("balances", 0, 10) == [], "no replica left")


def test_a_fatal_failure_stops_answers_and_heartbeats_and_asks_to_exit(tmp_path: Path) -> None:
    node, co = _node(tmp_path)
    exits: list[str | None] = []
    node.on_fatal = lambda: exits.append(node.failed)
    node.supervisor.restarts = 0  # the first crash of a part is one too many

    def deaf() -> None:
        raise RuntimeError("deaf")

    part = node.supervisor.thread("members", deaf, threading.Event())
    part.start()
    part.join(10)
    assert exits == ["members"]
    assert not node.ready() and not co.placement.active_here("balances", 0, 10)
    assert node.report() == {}
    assert node.membership.silenced  # no heartbeat
    assert node.materializer.stopped
    health = node.describe()
    assert health["failed"] == "members" and health["faults"] == {"members": 1}
    assert health["skipped_records"] == {"membership": 0, "changelog": 0, "catalog": 0}
