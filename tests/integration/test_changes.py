"""Live subscriptions on one node (issue 40, node-local): ``GET /v1/views/{view}/changes``
through a real node process on Apache Kafka, read by an SSE client (httpx streaming).

Rows are produced straight to the balances changelog (no pipeline: the node only
materializes), so each change's changelog offset is known. One node serves every test
of the module (a few seconds saved per test).
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from confluent_kafka import Producer
from procs import HTTP, Deployment, Proc, free_port
from sse import Sse, SseEvent
from updemo import until

from streamiq.auth import mint
from streamiq.client import Client
from streamiq.kafka.admin import ensure_topics
from streamiq.kafka.partitioner import partition_for
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

P = 3


class Env:
    def __init__(self, cluster: Deployment, port: int) -> None:
        self.cluster = cluster
        self.port = port
        self.topic = cluster.topic(BALANCES.changelog_topic)
        self.url = f"http://127.0.0.1:{port}/v1/views/balances/changes"

    def put(self, *rows: tuple[str, int | None]) -> None:
        """Write rows (account, balance; None: a tombstone) in this order."""
        p = Producer({"bootstrap.servers": self.cluster.bootstrap,
                      "partitioner": "murmur2_random"})
        for account, balance in rows:
            value = None if balance is None else json.dumps(
                {"account": account, "balance": balance, "count": 1, "last_update": 0})
            p.produce(self.topic, key=account.encode(), value=value)
        assert p.flush(30) == 0

    def balance(self, account: str) -> int | None:
        r = HTTP.get(f"http://127.0.0.1:{self.port}/account/{account}")
        return r.json()["value"]["balance"] if r.status_code == 200 else None

    def stream(self, **params: Any) -> Sse:
        headers = params.pop("headers", {})
        return Sse(self.url, params=params, headers=headers)


@pytest.fixture(scope="module")
def env(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root: Path = tmp_path_factory.mktemp("changes")
    started: list[Proc] = []

    def make(command: str, args: list[str], name: str | None = None,
             prefix: list[str] | None = None) -> Proc:
        p = Proc(command, args, root / "logs", name or command, prefix).start()
        started.append(p)
        return p

    cluster = Deployment(bootstrap, root, make, free_port)
    ensure_topics({"bootstrap.servers": bootstrap},
                  {cluster.topic(BALANCES.changelog_topic): P})
    port, _ = cluster.node("bank", extra=["--partitions", str(P),
                                          "--changes-keepalive-s", "0.3"])
    e = Env(cluster, port)
    e.put(("ready", 1))
    until(lambda: e.balance("ready") == 1, 60, "the node to serve the changelog")
    yield e
    for p in reversed(started):
        p.stop()


def _balances(events: list[SseEvent]) -> list[int | None]:
    return [e.data["value"]["balance"] if e.data["found"] else None for e in events]


def _changes(s: Sse, n: int) -> list[SseEvent]:
    out: list[SseEvent] = []
    while len(out) < n:
        e = s.event()
        assert e.event is None, f"expected a change, got {e}"
        out.append(e)
    return out


def test_a_key_streams_its_changes_in_order_and_resumes_exactly(env: Env) -> None:
    env.put(("k1", 10))
    until(lambda: env.balance("k1") == 10, 30, "k1 stored")
    p = partition_for(b"k1", P)
    with env.stream(key="k1") as s:
        assert s.response.headers["content-type"].startswith("text/event-stream")
        first = s.event()
        assert first.id is None and first.data["key"] == "k1"
        assert first.data["value"]["balance"] == 10 and first.data["found"] is True
        ready = s.event()
        assert ready.event == "ready" and ready.id is not None
        assert ready.id.startswith(f"{p}-") and ready.data["position"] == ready.id
        env.put(("other", 5), ("k1", 11), ("k1", 12), ("k1", 13))
        got = _changes(s, 3)
        assert _balances(got) == [11, 12, 13]  # the other key never comes
        offsets = [e.data["offset"] for e in got]
        assert offsets == sorted(offsets) and len(set(offsets)) == 3
        assert [e.id for e in got] == [f"{p}-{o + 1}" for o in offsets]
        after_11 = got[0].id
    env.put(("k1", 14), ("k1", None), ("k1", 16))
    until(lambda: env.balance("k1") == 16, 30, "k1 = 16 stored")
    # 12 and 13 were delivered above and 14, a delete and 16 came while no one watched:
    # resumed after 11, every one of them comes again once, in order
    with env.stream(key="k1", headers={"last-event-id": after_11}) as s:
        got = _changes(s, 5)
        assert _balances(got) == [12, 13, 14, None, 16]
        assert got[3].data["deleted"] is True and got[3].data["value"] is None
        ready = s.event()
        assert ready.event == "ready" and ready.id == got[-1].id
        env.put(("k1", 17))
        newest = _changes(s, 1)
        assert _balances(newest) == [17]
    # from= the newest id: nothing is missed, nothing repeated, the next change next
    with env.stream(key="k1", **{"from": newest[0].id}) as s:
        assert s.event().event == "ready"
        env.put(("k1", 18))
        assert _balances(_changes(s, 1)) == [18]


def test_a_prefix_and_the_whole_view_start_with_their_rows_then_change(env: Env) -> None:
    rows = {f"pre{i}": 100 + i for i in range(9)}
    env.put(*rows.items(), ("zzz", 1))
    until(lambda: env.balance("zzz") == 1 and env.balance("pre8") == 108, 30, "rows stored")
    with env.stream(prefix="pre") as s:
        first = {}
        while (e := s.event()).event != "ready":
            first[e.data["key"]] = e.data["value"]["balance"]
        assert first == rows and e.id is not None
        assert sorted(int(part.split("-")[0]) for part in e.id.split(".")) == list(range(P))
        env.put(("zzz", 2), ("pre3", 1003), ("pre7", 1007))
        got = _changes(s, 2)
        assert {e.data["key"]: e.data["value"]["balance"] for e in got} == {
            "pre3": 1003, "pre7": 1007}
    with env.stream() as s:  # the whole view: every row, then ready
        keys = set()
        while (e := s.event()).event != "ready":
            keys.add(e.data["key"])
        assert {"zzz", "ready", *rows} <= keys


def test_an_aggregate_streams_its_result_to_the_exact_totals(env: Env) -> None:
    url = f"http://127.0.0.1:{env.port}/v1/views/balances/aggregate/changes"
    params = {"prefix": "agg", "agg": ["sum(balance)", "count(*)"], "interval": "50"}
    with Sse(url, params=params) as s:
        first = s.event()
        assert first.id is None and first.data["status"] == "OK"
        assert first.data["rows"] == 0
        final = {f"agg{i}": 0 for i in range(10)}
        for round_ in range(1, 6):  # 50 changes in 5 bursts: results coalesced
            rows = [(k, round_ * 10 + i) for i, k in enumerate(final)]
            env.put(*rows)
            final.update(rows)
        results = []
        while True:
            e = s.event()
            assert e.event is None and e.id is None
            results.append(e.data["groups"])
            if e.data["rows"] == 10 and results[-1][0]["sum(balance)"] == sum(final.values()):
                break
        assert len(results) <= 50  # never more results than changes


class _Dropping(httpx.BaseTransport):
    """A transport whose first streamed response breaks after ``after`` chunks: a
    connection dropped under the client."""

    def __init__(self, after: int) -> None:
        self.inner = httpx.HTTPTransport()
        self.after = after
        self.dropped = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if not request.url.path.endswith("/changes") or self.dropped:
            return response
        self.dropped += 1
        stream, after = cast(httpx.SyncByteStream, response.stream), self.after

        class Breaking(httpx.SyncByteStream):
            def __iter__(self) -> Iterator[bytes]:
                for i, chunk in enumerate(stream):
                    if i == after:
                        raise httpx.ReadError("connection dropped (test)")
                    yield chunk

            def close(self) -> None:
                stream.close()

        return httpx.Response(response.status_code, headers=response.headers,
                              stream=Breaking(), request=request)


def test_the_client_resumes_a_dropped_stream_by_itself(env: Env) -> None:
    env.put(("cl", 1))
    until(lambda: env.balance("cl") == 1, 30, "cl stored")
    transport = _Dropping(after=3)
    with Client(f"127.0.0.1:{env.port}", transport=transport) as client:
        changes = client.changes("balances", key="cl")
        assert next(changes)["value"]["balance"] == 1
        env.put(*(("cl", v) for v in range(2, 9)))
        got: list[dict[str, Any]] = []
        while not got or got[-1]["value"]["balance"] != 8:
            got.append(next(changes))
        changes.close()
    assert transport.dropped == 1
    assert [c["value"]["balance"] for c in got] == list(range(2, 9))
    assert [c["offset"] for c in got] == sorted({c["offset"] for c in got})


def test_an_idle_stream_gets_keepalive_comments(env: Env) -> None:
    with env.stream(key="idle") as s:
        first = s.event()
        assert first.data == {"view": "balances", "key": "idle",
                              "partition": partition_for(b"idle", P), "found": False,
                              "value": None}
        assert s.event().event == "ready"
        assert s.next().comment == "keepalive"


@pytest.mark.parametrize(("params", "headers", "status", "field"), [
    ({"key": "a", "prefix": "b"}, {}, 400, "prefix"),
    ({"key": ""}, {}, 400, "key"),
    ({"key": "a", "from": "nonsense"}, {}, 400, "from"),
    ({"key": "a", "from": "0-1.1-2.2-3"}, {}, 400, "from"),  # not this key's partitions
    ({"key": "a"}, {"last-event-id": "x-1"}, 400, "Last-Event-ID"),
])
def test_bad_parameters_are_a_4xx_naming_them(env: Env, params: dict[str, str],
                                              headers: dict[str, str], status: int,
                                              field: str) -> None:
    r = HTTP.get(env.url, params=params, headers=headers)
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["field"] == field


def test_an_unknown_view_is_404(env: Env) -> None:
    r = HTTP.get(f"http://127.0.0.1:{env.port}/v1/views/nope/changes")
    assert r.status_code == 404 and r.json()["code"] == "UNKNOWN_VIEW"


def test_limits_per_node_and_token_and_an_expiring_token(cluster: Deployment) -> None:
    """429 with a JSON problem past --changes-max-per-token and
    --changes-max-subscriptions, a slot back once a stream closes (also one a client
    hung up on before its first byte); a stream whose token expires ends (event end)
    instead of streaming on."""
    cluster.auth = True
    ensure_topics({"bootstrap.servers": cluster.bootstrap},
                  {cluster.topic(BALANCES.changelog_topic): P})
    port, _ = cluster.node("bank", extra=["--partitions", str(P), "--changes-keepalive-s",
                                          "0.2", "--changes-max-per-token", "2",
                                          "--changes-max-subscriptions", "3"])
    url = f"http://127.0.0.1:{port}/v1/views/balances/changes"
    a, b = ({"authorization": f"Bearer {mint(cluster.jwt_secret, subject=s)}"}
            for s in ("a", "b"))

    def refused(headers: dict[str, str]) -> str:
        r = HTTP.get(url, params={"key": "x"}, headers=headers)
        assert r.status_code == 429, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        return str(r.json()["detail"])

    assert HTTP.get(url, params={"key": "x"}).status_code == 401  # scopes as for queries
    s1, s2 = Sse(url, params={"key": "x"}, headers=a), Sse(url, params={"key": "x"}, headers=a)
    assert s1.event().data["key"] == "x"
    assert "--changes-max-per-token" in refused(a)
    s3 = Sse(url, params={"key": "x"}, headers=b)  # another token: its own count
    assert "--changes-max-subscriptions" in refused(b)
    metrics = HTTP.get(f"http://127.0.0.1:{port}/metrics", headers=a).text
    assert "streamiq_subscriptions_open 3.0" in metrics, metrics
    assert re.search(r"^streamiq_subscription_events_total [1-9]", metrics, re.M), metrics
    s1.close()  # the node sees the stream go and gives its slot back
    opened: list[Sse] = []

    def slot() -> bool:
        s = Sse(url, params={"key": "x"}, headers=b)
        if s.response.status_code == 200:
            opened.append(s)
            return True
        s.close()
        return False

    until(slot, 30, "a slot freed by a closed stream")
    assert opened[0].event().data["key"] == "x"
    opened[0].close()
    s2.close()
    s3.close()
    short = {"authorization": f"Bearer {mint(cluster.jwt_secret, subject='c', ttl_s=2)}"}
    with Sse(url, params={"key": "x"}, headers=short) as s:
        for _ in range(200):  # a keepalive every 0.2 s: the token's 2 s many times over
            e = s.next()
            if e.event == "end":
                break
            assert e.event in (None, "ready") or e.comment == "keepalive"
        else:
            raise AssertionError("the stream outlived its token")
        assert e.data == {"reason": "the token has expired"}
        with pytest.raises(EOFError):
            s.event()
    for target in ("/v1/views/balances/changes?key=x",
                   "/v1/views/balances/aggregate/changes?agg=count(*)"):
        _hang_up(port, target, a, 6)  # more than either limit
    until(lambda: "streamiq_subscriptions_open 0.0" in HTTP.get(
        f"http://127.0.0.1:{port}/metrics", headers=a).text, 30,
        "the slots of streams hung up on before their first byte given back")
    with Sse(url, params={"key": "x"}, headers=a) as s1, \
            Sse(url, params={"key": "x"}, headers=a) as s2:
        assert s1.event().data["key"] == s2.event().data["key"] == "x"


def _hang_up(port: int, target: str, headers: dict[str, str], n: int) -> None:
    """Ask for a stream n times, each connection closed before reading a byte."""
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    request = f"GET {target} HTTP/1.1\r\nhost: 127.0.0.1\r\n{head}\r\n".encode()
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.sendall(request)
