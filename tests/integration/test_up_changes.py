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

import contextlib
import json
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from sse import Sse
from updemo import HEADERS, START_S, Up, post_json, until

from streamiq.client import Client
from streamiq.views.bank import BALANCES
from streamiq.views.bank import TOPIC as BANK_TOPIC

pytestmark = pytest.mark.integration

WRITES = 120


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    yield from Up(tmp_path_factory.mktemp("upchanges"), flags=("--restart-max-s", "5")).running()


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


def _continue(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # up may have replaced it meanwhile
        os.kill(pid, signal.SIGCONT)


def _through_a_fault(up: Up, tag: str, stop: bool) -> None:
    entry = up.node_ports[0]
    key, owner = _owned_elsewhere(up, entry, tag)
    pid = up.child("node", owner)
    amounts = [random.Random(tag).randint(1, 100) for _ in range(WRITES)]

    resume = threading.Timer(8, _continue, (pid,))

    def fault() -> None:
        if stop:
            os.kill(pid, signal.SIGSTOP)
            resume.start()
        else:
            os.kill(pid, signal.SIGKILL)

    try:
        with _subscribe(entry, key) as s:
            writer = _write(up, key, amounts, WRITES // 3, fault)
            got = _received(s, WRITES)
            writer.join(120)
    finally:  # the node goes on whatever happened (not left stopped for the next test)
        resume.cancel()
        if stop:
            _continue(pid)
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


def test_a_resume_by_last_event_id_on_another_node_continues_exactly_after_it(
        up: Up) -> None:
    """A reader of one node leaves after 15 changes; writes go on; it comes back on
    another node with the id of its 10th: changes 11 to 30 exactly (the ones it had
    again, since it asked for them, then the ones it missed), none twice, in order."""
    key, _ = _owned_elsewhere(up, up.node_ports[0], "resume")
    amounts = [random.Random(key).randint(1, 100) for _ in range(30)]
    with _subscribe(up.node_ports[0], key) as s:
        _write(up, key, amounts[:15], -1, lambda: None).join(120)
        s_ids: list[str] = []
        first: list[tuple[int, int]] = []
        while len(first) < 15:
            e = s.event()
            assert e.event is None and e.id is not None, e
            s_ids.append(e.id)
            first.append((e.data["value"]["balance"], e.data["value"]["count"]))
    _write(up, key, amounts[15:], -1, lambda: None).join(120)
    resumed: list[tuple[int, int]] = []
    headers = {**HEADERS, "last-event-id": s_ids[9]}
    with Sse(f"http://127.0.0.1:{up.node_ports[2]}/v1/views/balances/changes", timeout=60,
             params={"key": key}, headers=headers) as s:
        assert s.response.status_code == 200, s.response.read()
        while not resumed or resumed[-1][1] < 30:
            e = s.event()
            if e.event == "ready":  # the replay caught up with the store: live from here
                continue
            assert e.event is None, e
            resumed.append((e.data["value"]["balance"], e.data["value"]["count"]))
    log = _changelog(up, key, 30)
    assert first == log[:15]
    assert resumed == log[10:]  # exactly after the 10th: no gap, no duplicate


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


# -- a reader that stops reading --

STALL_S = 60  # the must-show's minute
STALLED = 16  # readers that stop, all on one node
KEYS = 200
RCVBUF = 4096  # the readers' socket buffer: the node, not the kernel, holds what waits
FLAT_MB = 16  # RSS growth in the minute's second half, per node
# a stalled stream holds about 2,000 changes before it coalesces (its inbox of 1,000 and
# the socket's 64 KiB, which Linux doubles): the stall lasts until far more were written
# (13-20k in the minute on a quiet machine; 1.8k once, with two test suites on 2 cores,
# and none was coalesced) and the view holds them (once, 11.5k written in the minute
# under a CI load of 24, none was coalesced: the pipeline had not folded them yet)
MIN_WRITES = 6_000
MAX_STALL_S = 300
DRAIN_S = 300  # each stream read again: a bound on a hang (a lost change), not a timing


class _Stalled:
    """A ``/changes`` reader on a raw socket with a small receive buffer: it reads the
    head and the first events, then nothing until ``drain`` (a phone in a tunnel, a
    stuck consumer loop)."""

    def __init__(self, port: int, prefix: str) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        self.sock.settimeout(60)  # a bound on each read, not a timing
        self.sock.connect(("127.0.0.1", port))
        self.sock.sendall(
            f"GET /v1/views/balances/changes?prefix={prefix} HTTP/1.1\r\n"
            f"host: 127.0.0.1\r\n{_auth_line()}\r\n".encode())
        self.raw = b""  # as received: the head, then chunked transfer coding
        self.buf = b""  # the body, decoded
        while b"\r\n\r\n" not in self.raw:
            self._recv()
        head, _, self.raw = self.raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"chunked" in head.lower(), head
        self._until(b"event: ready\n")  # no rows yet: ready, and its position
        assert b"position" in self._until(b"\n\n")

    def _recv(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, f"the stream ended: {self.raw[-500:]!r}"
        self.raw += chunk

    def _until(self, mark: bytes) -> bytes:
        while mark not in self.buf:
            size_line, sep, rest = self.raw.partition(b"\r\n")
            size = int(size_line.split(b";")[0], 16) if sep else -1
            if size < 0 or len(rest) < size + 2:
                self._recv()
                continue
            assert size > 0, "the stream ended"
            self.buf += rest[:size]
            self.raw = rest[size + 2:]
        out, _, self.buf = self.buf.partition(mark)
        return out + mark

    def drain(self, want: dict[str, tuple[int, int]], port: int) -> int:
        """Read until each key's newest row is ``want``'s (balance, count); the events
        marked coalesced. Past ``DRAIN_S`` (a bound on a hang, not a timing: the node
        sends a keepalive every 15 s, so a read never waits long), the keys still
        behind, what the stream and a lookup on ``port`` say of them."""
        seen: dict[str, tuple[int, int]] = {}
        coalesced = 0
        self.coalesced_keys: set[str] = set()
        deadline = time.monotonic() + DRAIN_S
        while any(seen.get(k) != v for k, v in want.items()):
            if time.monotonic() > deadline:
                behind = {k: (v, seen.get(k), _lookup(port, k))
                          for k, v in want.items() if seen.get(k) != v}
                raise AssertionError(f"{len(behind)} keys behind after {DRAIN_S} s "
                                     f"(written, streamed, looked up): {behind}")
            block = self._until(b"\n\n").decode()
            data = [ln[6:] for ln in block.splitlines() if ln.startswith("data: ")]
            if not data or "event: " in block:
                continue
            doc = json.loads("\n".join(data))
            coalesced += bool(doc.get("coalesced"))
            if doc.get("coalesced"):
                self.coalesced_keys.add(doc["key"])
            v = doc["value"]
            seen[doc["key"]] = (v["balance"], v["count"])
        return coalesced

    def close(self) -> None:
        self.sock.close()


def _lookup(port: int, key: str) -> tuple[int, int] | str:
    r = httpx.get(f"http://127.0.0.1:{port}/v1/views/balances/keys/{key}", headers=HEADERS,
                  timeout=30)
    if r.status_code != 200:
        return f"{r.status_code} {r.text[:200]}"
    v = r.json()["value"]
    return v["balance"], v["count"]


def _auth_line() -> str:
    return f"authorization: {HEADERS['authorization']}\r\n"


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        kb = next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
    return kb / 1024


def test_a_reader_that_stops_for_a_minute_leaves_memory_flat(up: Up) -> None:
    """Readers of a prefix stop reading while writes to its keys run for a minute: each
    node's memory stays flat (the owners keep a bounded buffer, then the newest value per
    key; the entry holds a bounded queue per stream); read again, each stream ends at
    the exact balances and counts."""
    tag = f"slow{uuid.uuid4().hex[:6]}"
    keys = [f"{tag}-{i}" for i in range(KEYS)]
    entry = up.node_ports[0]
    pids = {p: up.child("node", p) for p in up.node_ports}
    readers = [_Stalled(entry, tag) for _ in range(STALLED)]
    want: dict[str, tuple[int, int]] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def write() -> None:
        """Paced writes straight to the input topic (what the ingest writes; it alone
        made 13-20k in the minute on a quiet machine, 5.5k in 300 s in a loaded CI run):
        the readers' stall is the subject here, not the ingest's speed."""
        rng = random.Random(7)
        p = Producer({"bootstrap.servers": f"127.0.0.1:{up.broker_port}", "acks": "all",
                      "linger.ms": 5, "enable.idempotence": True})

        def delivered(key: str, amount: int) -> Callable[[object, object], None]:
            """A write counts once the broker has it (under a CI load of 24, one not
            flushed in time was counted and waited for, never to come)."""

            def done(err: object, _: object) -> None:
                if err is not None:
                    undelivered.append(err)
                    return
                with lock:
                    b, n = want.get(key, (0, 0))
                    want[key] = (b + amount, n + 1)

            return done

        while not stop.is_set():
            for _ in range(3):  # ~300 a second
                key, amount = rng.choice(keys), rng.randint(1, 100)
                p.produce(BANK_TOPIC, key=key, value=json.dumps(
                    {"account": key, "amount": amount, "ts": int(time.time() * 1000)}),
                    on_delivery=delivered(key, amount))
            p.poll(0)
            time.sleep(0.01)
        pending.append(p.flush(120))

    def written() -> int:
        with lock:
            return sum(n for _, n in want.values())

    def applied() -> int:
        """The writes the view holds (the sum of its keys' counts, asked of a node that
        has no stalled reader): what reached the streams, not only the input topic."""
        with contextlib.suppress(httpx.HTTPError, KeyError, IndexError, TypeError):
            r = httpx.get(f"http://127.0.0.1:{up.node_ports[1]}/v1/views/balances/aggregate",
                          params={"agg": "sum(count)", "prefix": tag + "-"}, headers=HEADERS,
                          timeout=30)
            return int(r.json()["groups"][0]["sum(count)"] or 0)
        return 0

    undelivered: list[object] = []
    pending: list[int] = []  # left unflushed: their delivery, counted or not, unknown
    writers = [threading.Thread(target=write, daemon=True)]
    rss: list[dict[int, float]] = []
    t0 = time.monotonic()
    log_at = len(up.log())
    try:
        for w in writers:
            w.start()
        while True:  # pacing: a sample every 5 s through the stall
            time.sleep(5)
            rss.append({p: _rss_mb(pid) for p, pid in pids.items()})
            stalled = time.monotonic() - t0
            if stalled >= MAX_STALL_S or (stalled >= STALL_S and written() >= MIN_WRITES
                                          and applied() >= MIN_WRITES):
                break  # (a loaded pipeline may not have folded the writes yet: then wait)
        held = applied()  # folded before the readers read again
        stop.set()
        for w in writers:
            w.join(180)
        assert pending == [0], f"the writer did not flush: {pending}"
        writes = written()
        half = len(rss) // 2
        growth = {p: max(s[p] for s in rss[half:]) - rss[half - 1][p] for p in pids}
        print(f"\nslow readers: {writes} writes to {len(want)} keys in {stalled:.0f} s while "
              f"{STALLED} readers stopped; RSS (MB) "
              f"{[{p: round(v) for p, v in s.items()} for s in rss]}; growth in the second "
              f"half {growth}")
        coalesced = [r.drain(want, up.node_ports[1]) for r in readers]
        print(f"read again: events marked coalesced per reader {coalesced}; "
              f"{len(undelivered)} writes refused by the broker")
        # evidence for a stream without coalesced events: the owners whose keys came
        # coalesced per reader, and each stream resumed elsewhere (its missed changes
        # then come exactly, read again from Kafka) or partition rebuilt meanwhile
        token = HEADERS["authorization"].removeprefix("Bearer ")
        with Client(f"127.0.0.1:{entry}", token=token) as c:
            c.refresh()
            owner = {k: c.owner("balances", k) for k in keys}
        by_owner = [sorted({owner[k] or "?" for k in r.coalesced_keys}) for r in readers]
        moved = [ln[:240] for ln in up.log()[log_at:].splitlines()
                 if "resume elsewhere" in ln or "changelog restarted" in ln]
        print(f"owners whose keys came coalesced, per reader: {by_owner}; streams moved or "
              f"rebuilt: {len(moved)} {moved[:10]}")
    finally:
        stop.set()
        for r in readers:
            r.close()
    # far more changes than a stream holds: a buffer would have to grow
    assert writes >= MIN_WRITES, f"only {writes} writes in {stalled:.0f} s: too few to test"
    assert held >= MIN_WRITES, f"only {held} writes folded in {stalled:.0f} s: too few to test"
    assert all(c > 0 for c in coalesced), (coalesced, moved)  # newest value per key, said so
    # flat: with 1 MiB unsent per peer stream (HIGH_WATER before) the owner of the other
    # partitions grew 72 MB in the minute, 9 MB every 5 s; bounded, 2-8 MB. (An
    # unbounded inbox, STREAMIQ_CHANGES_BUFFER=1000000, grows ~1 MB every 5 s here, and
    # fails on ``coalesced`` above.)
    assert all(g < FLAT_MB for g in growth.values()), growth
