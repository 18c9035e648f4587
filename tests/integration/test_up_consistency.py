"""The bank workload through ``streamiq up`` (issue 46): 8 clients transfer money among 100
accounts while 4 readers ask ``consistent=true`` aggregates (sum of balances) and full
scans from every node, through a SIGKILL of a node, a SIGSTOP of a node and a SIGKILL of
the pipeline.

Every consistent answer sums to the deposits; no reader, sending its newest cut as
``position=``, reads an older cut; sampled scans are exactly the input folded up to
their cut (the test's own fold of the topic); the final state is exact on every node.
The same checker on plain reads counts the answers off the deposits, so it can fail.
Reads that get no answer (a killed node refuses connections, a stopped one answers
late, no cut is reachable while the pipeline is down) are counted and printed, never
taken as right or wrong.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
import pytest
from cutcheck import at_or_past, fold
from updemo import CONVERGE_S, HEADERS, START_S, Up, post_json, until

pytestmark = pytest.mark.integration

PREFIX = "bk-"
ACCOUNTS = [f"{PREFIX}{i:03d}" for i in range(100)]
DEPOSIT = 1000
DEPOSITS = DEPOSIT * len(ACCOUNTS)
TOPIC = "bank-transactions"  # up's default app, no topic prefix


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    yield from Up(tmp_path_factory.mktemp("upc"), flags=("--restart-max-s", "5")).running()


@dataclass
class Reader:
    """One reader's counts: answers, wrong totals, cuts older than its newest, no answer."""

    consistent: bool
    answered: int = 0
    wrong: list[str] = field(default_factory=list)
    backwards: list[str] = field(default_factory=list)
    unanswered: Counter[str] = field(default_factory=Counter)
    scans: list[tuple[dict[str, int], str]] = field(default_factory=list)
    answered_at: list[float] = field(default_factory=list)
    newest: str | None = None

    def read(self, c: httpx.Client, port: int, scan: bool) -> None:
        params: dict[str, Any] = {"prefix": PREFIX}
        if self.consistent:
            params |= {"consistent": "true", "wait_ms": 8000}
            if self.newest:
                params["position"] = self.newest
        url = f"http://127.0.0.1:{port}/v1/views/balances/"
        try:
            r = (c.get(url + "scan", params={**params, "limit": 1000}) if scan else
                 c.get(url + "aggregate", params={**params, "agg": "sum(balance)"}))
        except httpx.HTTPError as exc:
            self.unanswered[type(exc).__name__] += 1
            return
        if r.status_code != 200:
            code = r.json().get("code") if r.headers.get("content-type", "").endswith(
                "json") else None
            self.unanswered[f"{r.status_code} {code}"] += 1
            return
        doc = r.json()
        if scan:
            rows = {x["key"]: int(x["value"]["balance"]) for x in doc["rows"]}
            total = sum(rows.values())
        else:
            total = int(doc["groups"][0]["sum(balance)"]) if doc["groups"] else 0
        self.answered += 1
        self.answered_at.append(time.monotonic())
        if total != DEPOSITS:
            self.wrong.append(f"{'scan' if scan else 'aggregate'} on {port}: {total}")
        if not self.consistent:
            return
        cut = doc["cut"]
        if self.newest is not None and not at_or_past(cut, self.newest):
            self.backwards.append(f"on {port}: {cut} after {self.newest}")
        self.newest = cut
        if scan and len(self.scans) < 40:
            self.scans.append((rows, cut))

    def run(self, ports: list[int], stop: threading.Event, seed: int) -> None:
        rnd = random.Random(seed)
        with httpx.Client(headers=HEADERS, timeout=15) as c:
            i = 0
            while not stop.is_set():
                self.read(c, ports[i % len(ports)], scan=rnd.random() < 0.5)
                i += 1
                if not self.consistent:
                    time.sleep(0.05)


def _transfers(ingest: int, stop: threading.Event, seed: int, errors: list[str]) -> None:
    rnd = random.Random(seed)
    with httpx.Client(headers=HEADERS, base_url=f"http://127.0.0.1:{ingest}", timeout=30) as w:
        while not stop.is_set():
            a, b = rnd.sample(ACCOUNTS, 2)
            r = w.post("/transfer", params={"from": a, "to": b, "amount": rnd.randint(1, 50)})
            if r.status_code != 200:
                errors.append(r.text[:200])
            time.sleep(0.02)


def _consistent_scan(port: int) -> tuple[dict[str, int], str]:
    with httpx.Client(headers=HEADERS, timeout=60) as c:
        doc = _get_ok(c, f"http://127.0.0.1:{port}/v1/views/balances/scan",
                            {"prefix": PREFIX, "limit": 1000, "consistent": "true",
                             "wait_ms": 20_000})
    return {x["key"]: int(x["value"]["balance"]) for x in doc["rows"]}, doc["cut"]


def _deposited(port: int) -> bool:
    return sum(_consistent_scan(port)[0].values()) == DEPOSITS


def _get_ok(c: httpx.Client, url: str, params: dict[str, Any]) -> Any:
    r = c.get(url, params=params)
    assert r.status_code == 200, (url, r.status_code, r.text[:300])
    return r.json()


def _kills(up: Up, marks: dict[str, float]) -> None:
    """Node 1 SIGKILLed (until restarted), node 2 SIGSTOPped 10 s, the pipeline
    SIGKILLed (until restarted), each with the load running; then 15 s more."""
    time.sleep(8)
    offset = len(up.log())
    os.kill(up.child("node", up.node_ports[1]), signal.SIGKILL)
    up.wait_for(rf"^streamiq: node:{up.node_ports[1]} ready again", START_S, offset)
    time.sleep(5)
    stopped = up.child("node", up.node_ports[2])
    os.kill(stopped, signal.SIGSTOP)
    try:
        time.sleep(10)
    finally:
        os.kill(stopped, signal.SIGCONT)
    time.sleep(5)
    offset = len(up.log())
    os.kill(up.child("pipeline"), signal.SIGKILL)
    up.wait_for(r"^streamiq: pipeline ready again", START_S, offset)
    marks["pipeline back"] = time.monotonic()
    time.sleep(15)


def test_bank_transfers_read_at_one_cut_through_kills_of_every_part(up: Up) -> None:
    ports = up.node_ports
    with httpx.Client(headers=HEADERS, base_url=f"http://127.0.0.1:{up.ingest_port}",
                      timeout=30) as c:
        for a in ACCOUNTS:
            post_json(c, f"/account/{a}", params={"amount": DEPOSIT})
    for port in ports:
        until(partial(_deposited, port), CONVERGE_S, f"the deposits visible on {port}")

    stop, errors = threading.Event(), list[str]()
    readers = [Reader(consistent=True) for _ in range(4)]
    plain = Reader(consistent=False)
    threads = [threading.Thread(target=_transfers, args=(up.ingest_port, stop, s, errors))
               for s in range(8)]
    threads += [threading.Thread(target=r.run, args=(ports, stop, s))
                for s, r in enumerate([*readers, plain])]
    marks: dict[str, float] = {}
    for t in threads:
        t.start()
    try:
        _kills(up, marks)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    answered = sum(r.answered for r in readers)
    unanswered = sum((r.unanswered for r in readers), Counter())
    print(f"\n{answered} consistent reads answered, unanswered {dict(unanswered)}; plain: "
          f"{plain.answered} answered, {len(plain.wrong)} off the deposits; "
          f"{len(errors)} transfers refused")
    assert not errors, errors[:3]  # ingest never went down
    assert [w for r in readers for w in r.wrong] == [], [r.wrong[:3] for r in readers]
    assert [b for r in readers for b in r.backwards] == [], [r.backwards[:3] for r in readers]
    assert answered >= 20, (answered, dict(unanswered))
    assert all(any(t > marks["pipeline back"] for t in r.answered_at) for r in readers), \
        "every reader answered again once the pipeline was back"
    scans = [s for r in readers for s in r.scans]
    for rows, cut in scans[:: max(1, len(scans) // 6)]:
        assert rows == fold(f"127.0.0.1:{up.broker_port}", TOPIC, cut, PREFIX, ACCOUNTS), cut
    for port in ports:  # the final state: the whole input, exact on every node
        rows, cut = _consistent_scan(port)
        assert sum(rows.values()) == DEPOSITS, (port, cut)
        assert rows == fold(f"127.0.0.1:{up.broker_port}", TOPIC, cut, PREFIX, ACCOUNTS)
    assert plain.wrong, "no plain read saw a transfer half applied: the checker proves nothing"
