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

Usage: .venv/bin/python bench/bench_positions.py [--samples 200] [--pace-ms 50]
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--samples", type=int, default=200, help="writes per query type")
    ap.add_argument("--pace-ms", type=int, default=50)
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


if __name__ == "__main__":
    main()
