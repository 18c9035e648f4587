"""Read-your-writes per query type in real-time mode: a POST to its read, with the
write's position, answered by another node, p50/p99, beside the plain freshness of the
same writes (POST -> visible on all 3 nodes) in the same run.

One real-time deployment (``--app bank``, ingest, 3 nodes with SQL, the pipeline with the
product's defaults: 300 s batches, so markers do not come during a sample). Each sample
POSTs a deposit to one of 50 accounts and then asks one node, in turn, a query carrying
the POST's ``position`` (``wait_ms`` 30 s): the written key's lookup, another key's
lookup, a multi-get, a scan, an aggregate, a top-k, and SQL (``SET streamiq.position``,
then ``SELECT sum(balance)``). Every answer is checked against the balances written so
far (a wrong one is counted, never timed). Targets (issue 46): each within the write's
own freshness, p50 <= 50 ms, p99 <= 250 ms.

Then, in the same deployment, reads at one cut against plain ones: ``--keys`` accounts
(100,000) deposited straight into the input topic, then, while a writer deposits to
them at ``--write-rate`` (50/s), a plain ``sum(balance)`` over all of them and the same
with ``consistent=true``, alternating, from each node in turn, ``--pairs`` (60) times:
p50/p99 of each and the ratio of the p50s (target: at most 1.5x), how often a
consistent read's cut was asked again (``streamiq_cut_retries_total``), and the
versions the nodes kept for it (``streamiq_cut_versions``, ``..._version_bytes``:
memory only, nothing on disk).

Usage: .venv/bin/python bench/bench_positions.py [--samples 200] [--pace-ms 50]
       [--keys 100000] [--pairs 60] [--write-rate 50]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import bench_broker, pct
from bench_freshness import Parts

ACCOUNTS = 50
Check = Callable[[httpx.AsyncClient, int, str, str, dict[str, int]], Awaitable[bool]]


def _balance(r: httpx.Response) -> int:
    return int(r.json()["value"]["balance"]) if r.status_code == 200 else -1


async def _own(c: httpx.AsyncClient, port: int, pos: str, acct: str,
               want: dict[str, int]) -> bool:
    r = await c.get(f"http://127.0.0.1:{port}/account/{acct}",
                    params={"position": pos, "wait_ms": 30_000})
    return _balance(r) == want[acct]


async def _other(c: httpx.AsyncClient, port: int, pos: str, acct: str,
                 want: dict[str, int]) -> bool:
    r = await c.get(f"http://127.0.0.1:{port}/account/bp-other",
                    params={"position": pos, "wait_ms": 30_000})
    return _balance(r) == want["bp-other"]


def _view(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1/views/balances"


async def _multiget(c: httpx.AsyncClient, port: int, pos: str, acct: str,
                    want: dict[str, int]) -> bool:
    r = await c.post(f"{_view(port)}/keys", params={"position": pos, "wait_ms": 30_000},
                     json={"keys": [acct, "bp-other"]})
    got = [x["value"]["balance"] for x in r.json()["results"]] if r.status_code == 200 else []
    return got == [want[acct], want["bp-other"]]


async def _scan(c: httpx.AsyncClient, port: int, pos: str, acct: str,
                want: dict[str, int]) -> bool:
    r = await c.get(f"{_view(port)}/scan", params={"position": pos, "wait_ms": 30_000,
                                                   "prefix": "bp-", "limit": 1000})
    got = {x["key"]: x["value"]["balance"] for x in r.json()["rows"]} \
        if r.status_code == 200 else {}
    return got == want


async def _aggregate(c: httpx.AsyncClient, port: int, pos: str, acct: str,
                     want: dict[str, int]) -> bool:
    r = await c.get(f"{_view(port)}/aggregate", params={
        "position": pos, "wait_ms": 30_000, "prefix": "bp-", "agg": "sum(balance)"})
    return r.status_code == 200 and r.json()["groups"] == [{"sum(balance)": sum(want.values())}]


async def _top(c: httpx.AsyncClient, port: int, pos: str, acct: str,
               want: dict[str, int]) -> bool:
    r = await c.get(f"{_view(port)}/top", params={
        "position": pos, "wait_ms": 30_000, "prefix": "bp-", "column": "balance", "k": 1})
    got = [x["value"]["balance"] for x in r.json()["rows"]] if r.status_code == 200 else []
    return got == [max(want.values())]


class Sql:
    """One psycopg connection per node, asking with the write's position."""

    def __init__(self, ports: list[int]) -> None:
        import psycopg

        self.conns = {p: psycopg.connect(host="127.0.0.1", port=p, dbname="streamiq",
                                         password="any", sslmode="disable", autocommit=True)
                      for p in ports}

    async def __call__(self, c: httpx.AsyncClient, port: int, pos: str, acct: str,
                       want: dict[str, int]) -> bool:
        return await asyncio.to_thread(self._ask, port, pos, want)

    def _ask(self, port: int, pos: str, want: dict[str, int]) -> bool:
        with self.conns[port].cursor() as cur:
            cur.execute(f"SET streamiq.position = '{pos}'")
            cur.execute("SET streamiq.wait_ms = '30000'")
            cur.execute("SELECT sum(balance) FROM balances WHERE account LIKE 'bp-%'")
            row = cur.fetchone()
        return row is not None and int(row[0]) == sum(want.values())


async def _visible(c: httpx.AsyncClient, ports: list[int], pos: str, acct: str,
                   want: dict[str, int]) -> bool:
    """Plain freshness: every node asked (no position) until each shows the write."""
    pending = set(ports)
    deadline = time.monotonic() + 30
    while pending and time.monotonic() < deadline:
        for port in list(pending):
            r = await c.get(f"http://127.0.0.1:{port}/account/{acct}")
            if _balance(r) == want[acct]:
                pending.discard(port)
        await asyncio.sleep(0.001)
    return not pending


async def _run(parts: Parts, kinds: dict[str, Check], samples: int, pace: float
               ) -> dict[str, tuple[list[float], int]]:
    want: dict[str, int] = {}
    out: dict[str, tuple[list[float], int]] = {k: ([], 0) for k in ["freshness", *kinds]}
    async with httpx.AsyncClient(timeout=60) as c:
        ingest = f"http://127.0.0.1:{parts.ingest}/account"
        r = await c.post(f"{ingest}/bp-other", params={"amount": 1})
        want["bp-other"] = 1
        for i in range(samples + 5):
            for name in ["freshness", *kinds]:
                acct, amount = f"bp-{(i * 7) % ACCOUNTS}", 1 + i % 97
                t0 = time.perf_counter()
                r = await c.post(f"{ingest}/{acct}", params={"amount": amount})
                want[acct] = want.get(acct, 0) + amount
                pos, port = r.json()["position"], parts.ports[i % 3]
                ok = await (_visible(c, parts.ports, pos, acct, want) if name == "freshness"
                            else kinds[name](c, port, pos, acct, want))
                took = time.perf_counter() - t0
                times, wrong = out[name]
                if not ok:
                    out[name] = (times, wrong + 1)
                elif i >= 5:  # the first few warm the clients and the JIT
                    times.append(took)
                await asyncio.sleep(pace)
    return out


def _load(bootstrap: str, topic: str, keys: int) -> None:
    """``keys`` accounts of 1 each, straight into the input topic."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    now = int(time.time() * 1000)
    for i in range(keys):
        acct = f"bk{i:07d}"
        p.produce(topic, key=acct, value=orjson.dumps({"account": acct, "amount": 1,
                                                       "ts": now}))
        if i % 10_000 == 0:
            p.poll(0)
    p.flush(120)


def _metric(c: httpx.Client, port: int, name: str) -> float:
    text = c.get(f"http://127.0.0.1:{port}/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + " ", name + "{")))


def _cut_vs_plain(parts: Parts, bootstrap: str, keys: int, pairs: int, rate: float
                  ) -> dict[str, Any]:
    """Plain and consistent sums over ``keys`` accounts, alternating, while deposits flow."""
    _load(bootstrap, "real-time.bank-transactions", keys)
    url = "/v1/views/balances/aggregate"
    agg = {"agg": "sum(balance)", "prefix": "bk"}
    out: dict[str, Any] = {"plain": [], "consistent": [], "wrong": 0}
    with httpx.Client(timeout=120) as c:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            r = c.get(f"http://127.0.0.1:{parts.ports[0]}{url}", params=agg)
            if r.status_code == 200 and r.json()["groups"] == [{"sum(balance)": keys}]:
                break
            time.sleep(1)
        else:
            raise TimeoutError(f"{keys} accounts not visible in 600 s")
        stop = threading.Event()
        writer = threading.Thread(target=_deposits, args=(parts.ingest, keys, rate, stop))
        writer.start()
        retries0 = sum(_metric(c, p, "streamiq_cut_retries_total") for p in parts.ports)
        try:
            for i in range(pairs + 3):
                port = parts.ports[i % 3]
                for name, extra in (("plain", {}), ("consistent", {"consistent": "true"})):
                    t0 = time.perf_counter()
                    r = c.get(f"http://127.0.0.1:{port}{url}", params={**agg, **extra})
                    took = time.perf_counter() - t0
                    if r.status_code != 200:
                        out["wrong"] += 1
                    elif i >= 3:  # warm-up: the versions start with the first
                        out[name].append(took)
            out["versions"] = sum(_metric(c, p, "streamiq_cut_versions") for p in parts.ports)
            out["version_bytes"] = sum(_metric(c, p, "streamiq_cut_version_bytes")
                                       for p in parts.ports)
        finally:
            stop.set()
            writer.join()
        out["retries"] = sum(_metric(c, p, "streamiq_cut_retries_total")
                             for p in parts.ports) - retries0
    return out


def _deposits(ingest: int, keys: int, rate: float, stop: threading.Event) -> None:
    with httpx.Client(timeout=30) as c:
        i = 0
        while not stop.is_set():
            c.post(f"http://127.0.0.1:{ingest}/account/bk{(i * 7919) % keys:07d}",
                   params={"amount": 1})
            i += 1
            time.sleep(1 / rate)


def _print_cut(got: dict[str, Any], keys: int, rate: float) -> None:
    print(f"reads at one cut vs plain: sum(balance) over {keys:,} accounts while "
          f"{rate:g} deposits/s flow, alternating, each node in turn; target <= 1.5x")
    p50 = {}
    for name in ("plain", "consistent"):
        ms = sorted(t * 1000 for t in got[name])
        p50[name] = pct(ms, 50)
        print(f"  {name:<11} n={len(ms):4d}  p50 {p50[name]:7.1f} ms  p99 {pct(ms, 99):7.1f} ms"
              f"  max {ms[-1]:7.1f} ms")
    print(f"  consistent/plain p50: {p50['consistent'] / p50['plain']:.2f}x; asked again "
          f"{got['retries']:.0f} times; not answered {got['wrong']}; versions kept at the end "
          f"{got['versions']:.0f} ({got['version_bytes'] / 1e6:.2f} MB of keys and values, "
          "memory only)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--samples", type=int, default=200, help="writes per query type")
    ap.add_argument("--pace-ms", type=int, default=50)
    ap.add_argument("--keys", type=int, default=100_000, help="accounts for the cut's test")
    ap.add_argument("--pairs", type=int, default=60, help="plain + consistent reads")
    ap.add_argument("--write-rate", type=float, default=50.0, help="deposits/s meanwhile")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with bench_broker() as broker:
        parts = Parts(broker.bootstrap_servers, "real-time", None, sql=True)
        try:
            parts.ready()
            sql = Sql(parts.sql_ports)
            kinds: dict[str, Check] = {
                "lookup, written key": _own, "lookup, another key": _other,
                "multi-get": _multiget, "scan": _scan, "aggregate": _aggregate,
                "top-k": _top, "SQL sum (psql wire)": sql}
            sql_of = dict(zip(parts.ports, parts.sql_ports, strict=True))
            sql.conns = {p: sql.conns[sql_of[p]] for p in parts.ports}
            out = asyncio.run(_run(parts, kinds, a.samples, a.pace_ms / 1000))
            cut = _cut_vs_plain(parts, broker.bootstrap_servers, a.keys, a.pairs,
                                a.write_rate) if a.keys else None
        finally:
            parts.stop()
    print("read-your-writes in real-time mode (300 s batches): POST -> the read with the "
          "write's position answered by a node (each in turn), checked exact; "
          "freshness = POST -> visible on all 3 nodes without a position; "
          "target: within freshness, p50 <= 50 ms, p99 <= 250 ms")
    base = pct(sorted(out["freshness"][0]), 50)
    for name, (times, wrong) in out.items():
        ms = sorted(t * 1000 for t in times)
        if not ms:
            print(f"  {name:<24} no answers ({wrong} wrong)")
            continue
        p50 = pct(ms, 50)
        print(f"  {name:<24} n={len(ms):4d}  p50 {p50:7.1f} ms  p99 {pct(ms, 99):7.1f} ms  "
              f"max {ms[-1]:7.1f} ms  {p50 / (base * 1000):4.2f}x freshness p50  "
              f"wrong {wrong}")
    if cut is not None:
        _print_cut(cut, a.keys, a.write_rate)


if __name__ == "__main__":
    main()
