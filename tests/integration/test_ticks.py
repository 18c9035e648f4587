"""Ticks under concurrent writes: no read with a position answers without its write.

A tick's claim (every aggregation task's tick row reached a changelog partition, so the
partition holds every row of the input before the tick: pipeline/ticks.py) is only safe
if Spark writes each task's rows in the order it folded their records. This test leans
on that while the aggregation is busy: four clients each own a set of accounts, write to
one and at once read all of theirs with the write's position, from any node, through
every fan-out query type; with hour-long real-time batches no marker helps. Since only
the client writes its accounts, a read that reflects its write shows exactly the
client's running totals. Meanwhile a producer writes other accounts straight to the
input topic. The same reads without the position show the checker catches stale reads.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from streamiq.client._core import KEEPALIVE_S

pytestmark = pytest.mark.integration

CLIENTS = 4
ROUNDS = 40


def _read(c: httpx.Client, base: str, kind: str, prefix: str, accounts: list[str],
          params: dict[str, Any]) -> dict[str, int] | str:
    """One read of the client's accounts as {account: balance} (the error text if refused)."""
    if kind == "scan":
        r = c.get(f"{base}/scan", params={**params, "prefix": prefix})
        rows = r.json().get("rows", []) if r.status_code == 200 else []
        got = {x["key"]: x["value"]["balance"] for x in rows}
    elif kind == "multiget":
        r = c.post(f"{base}/keys", params=params, json={"keys": accounts})
        res = r.json().get("results", []) if r.status_code == 200 else []
        got = {x["key"]: x["value"]["balance"] for x in res if x.get("value")}
    elif kind == "aggregate":
        r = c.get(f"{base}/aggregate", params={**params, "prefix": prefix,
                                               "agg": "sum(balance)"})
        groups = r.json().get("groups", []) if r.status_code == 200 else []
        got = {"sum": int(groups[0]["sum(balance)"] or 0)} if groups else {}
    else:
        r = c.get(f"{base}/top", params={**params, "prefix": prefix, "column": "balance",
                                         "k": len(accounts)})
        rows = r.json().get("rows", []) if r.status_code == 200 else []
        got = {x["key"]: x["value"]["balance"] for x in rows}
    return got if r.status_code == 200 else f"{r.status_code} {r.text[:200]}"


def _evidence(c: httpx.Client, port: int, kind: str, prefix: str, accounts: list[str],
              params: dict[str, Any]) -> str:
    """What a stale read with a position leaves to go on (one CI run saw a scan behind
    the write it waited for, once): the position, the same read again, and the node's
    positions and partitions as its /health says."""
    try:
        again = _read(c, f"http://127.0.0.1:{port}/v1/views/balances", kind, prefix,
                      accounts, params)
        health = c.get(f"http://127.0.0.1:{port}/health").json()
    except httpx.HTTPError as exc:
        return f"; evidence not read: {exc!r}"
    return (f"; position {params['position']}; read again {again}; the node's positions "
            f"{health.get('positions', {}).get('balances')} partitions "
            f"{health.get('partitions', {}).get('balances')}")


def _client(n: int, ingest: int, ports: list[int], with_position: bool,
            stale: list[str], errors: list[str]) -> None:
    rng = random.Random(n)
    prefix = f"tk{n}{'p' if with_position else 'n'}-"
    accounts = [f"{prefix}{i}" for i in range(8)]
    want: dict[str, int] = {}
    # the client's expiry (a read sent on a connection as a node closed it was reset, in a
    # fresh-clone run, when nodes closed one idle for 5 s: httpx reuses one up to 5 s)
    with httpx.Client(timeout=60, limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S)) as c:
        for i in range(ROUNDS):
            account, amount = rng.choice(accounts), rng.randint(1, 1000)
            w = c.post(f"http://127.0.0.1:{ingest}/account/{account}",
                       params={"amount": amount})
            if w.status_code != 200:
                errors.append(f"write {w.status_code} {w.text[:200]}")
                continue
            want[account] = want.get(account, 0) + amount
            kind = ("scan", "multiget", "aggregate", "top")[i % 4]
            port = rng.choice(ports)
            params = {"position": w.json()["position"], "wait_ms": 30_000} \
                if with_position else {}
            try:
                got = _read(c, f"http://127.0.0.1:{port}/v1/views/balances", kind, prefix,
                            accounts, params)
            except httpx.HTTPError as exc:
                got = f"{type(exc).__name__}: {exc}"
            expect = {"sum": sum(want.values())} if kind == "aggregate" else want
            if isinstance(got, str):
                errors.append(f"{kind} on {port}: {got}")
            elif got != expect:
                stale.append(f"{kind} on {port} after write {i}: {got} != {expect}"
                             + (_evidence(c, port, kind, prefix, accounts, params)
                                if with_position else ""))


def _noise(bootstrap: str, topic: str, stop: threading.Event, sent: list[int]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    i = 0
    while not stop.is_set():
        for _ in range(50):
            p.produce(topic, key=f"noise-{i % 97}", value=json.dumps(
                {"account": f"noise-{i % 97}", "amount": 1, "ts": int(time.time() * 1000)}))
            i += 1
        p.poll(0)
        # ~400 records/s: concurrent writes, not a load test (bench_freshness is): at ~1,000/s
        # a CI run with three Spark pipelines on two cores (load 16) fell 30 s behind
        time.sleep(0.125)
    p.flush(30)
    sent.append(i)


def _caught_up(ingest: int, ports: list[int]) -> None:
    """The pipeline folds the noise as it comes: a write is read with its position on
    every node. A CI run at load 51 answered the clients' first reads, made as the noise
    started, 503 after 30 s, and every later one in time: the start of the noise, not
    the ticks, is what this waits out (each read here may take two minutes)."""
    with httpx.Client(timeout=180) as c:
        w = c.post(f"http://127.0.0.1:{ingest}/account/tk-warm", params={"amount": 1})
        assert w.status_code == 200, w.text
        for port in ports:
            r = c.get(f"http://127.0.0.1:{port}/v1/views/balances/scan",
                      params={"prefix": "tk-warm", "position": w.json()["position"],
                              "wait_ms": 120_000})
            assert r.status_code == 200, r.text[:300]


def _run(clients: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=clients, args=(n,)) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)


def test_no_read_with_a_position_misses_its_write_under_concurrent_writes(
        cluster: Any, bootstrap: str) -> None:
    pipe = cluster.pipeline("bank", extra=["--realtime-batch-s", "3600"], wait=False)
    ingest, _ = cluster.ingest("bank")
    ports = [p for p, _ in cluster.nodes(3, "bank")]
    cluster.pipeline_ready(pipe)
    stop, sent = threading.Event(), list[int]()
    noise = threading.Thread(target=_noise, args=(
        bootstrap, f"{cluster.prefix}bank-transactions", stop, sent))
    noise.start()
    try:
        _caught_up(ingest, ports)
        stale: list[str] = []
        errors: list[str] = []
        _run(lambda n: _client(n, ingest, ports, True, stale, errors))
        assert stale == [], stale[:5]
        assert errors == [], errors[:5]
        # the checker sees stale reads when the position is not sent: reads at once after
        # a write miss it (the write is tens of milliseconds from visible)
        unchecked: list[str] = []
        _run(lambda n: _client(n, ingest, ports, False, unchecked, errors))
        assert errors == [], errors[:5]
        assert unchecked, "reads without a position never missed a write: the checker " \
                          "would not catch one"
    finally:
        stop.set()
        noise.join(60)
    assert sent and sent[0] > 0
