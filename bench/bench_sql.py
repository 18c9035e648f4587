"""SQL over the PostgreSQL wire vs the HTTP API on real nodes (issue 26), one run.

Setup: an embedded broker on a free port, ``--keys`` ``balances`` rows and as many
``order_counts`` rows (``--keys / 2`` stores x 2 types) produced straight to the
changelogs (3 partitions), 3 nodes (``--standby-replicas 0``, ``--sql-port``).

Load: both sides from Python asyncio on one connection each (c=1: latency), so the
client's cost is alike: HTTP with a keep-alive httpx client, SQL with psycopg 3 and a
prepared statement (``WHERE account = %s``, prepare=True). Key lookups answered by the
entry node (local) and by its peer (forwarded, one hop), in ``--pairs`` back-to-back
pairs of ``--seconds`` each, alternating which goes first, SQL / HTTP per pair
(median, every pair shown): a neighbour's burst on this shared machine skews one pair.
Then ``GROUP BY type`` over order_counts (the scatter-gather aggregate) against the
HTTP aggregate, ``--agg-runs`` of each, alternating, p50. Targets (issue 38): a local
lookup's p50 by SQL at most HTTP's, the GROUP BY at most 0.2 s.

Last (issue 38, "no client can hurt a node"), six SQL statements that would run for
hours (``count(*) FROM range(1e12) WHERE ...``, on six connections to the entry node):
the entry node's HTTP lookups (p50, c=1) and aggregates (p50) while they run against
idle, in ``--stall-pairs`` pairs (idle, then loaded; each pair's ratio, the median
printed), and /health's answer time while loaded. Target: at most 2x idle.

Usage: .venv/bin/python bench/bench_sql.py [--keys 100000] [--pairs 6] [--seconds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg
from _common import NodeProc, bench_broker, free_port, pct, wait_ready
from bench_queries import wait_loaded

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES
from streamiq.views.orders import ORDER_COUNTS

Call = Callable[[str], Awaitable[Any]]
GROUP_BY = "SELECT type, count(*), sum(count) FROM order_counts GROUP BY type"
LONG = "SELECT count(*) FROM range(1000000000000) WHERE range % 7 = 3"  # hours of DuckDB
AGG = {"group_by": "type", "agg": ["count(*)", "sum(count)"]}


def data(n: int) -> dict[str, list[dict[str, Any]]]:
    return {"balances": [{"account": f"k{i:07d}", "balance": i % 997, "count": 1,
                          "last_update": 0} for i in range(n)],
            "order_counts": [{"store": f"s{i // 2:07d}", "type": ("GENERAL", "RESTAURANT")[i % 2],
                              "count": i % 13, "revenue": float(i % 101)} for i in range(n)]}


async def timed(call: Call, keys: list[str], seconds: float) -> dict[str, float]:
    lat: list[float] = []
    stop, i = time.perf_counter() + seconds, 0
    while time.perf_counter() < stop:
        t = time.perf_counter()
        await call(keys[i % len(keys)])
        lat.append((time.perf_counter() - t) * 1e3)
        i += 1
    return {"p50": pct(lat, 50), "p99": pct(lat, 99), "rps": len(lat) / seconds}


async def lookups(http_port: int, sql_port: int, keys: dict[str, list[str]],
                  a: argparse.Namespace) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{http_port}") as http, \
            await psycopg.AsyncConnection.connect(
                host="127.0.0.1", port=sql_port, dbname="streamiq", password="any",
                sslmode="disable", autocommit=True) as sql:

        async def by_http(k: str) -> None:
            assert (await http.get(f"/v1/views/balances/keys/{k}")).status_code == 200

        async def by_sql(k: str) -> None:
            cur = await sql.execute("SELECT balance FROM balances WHERE account = %s", (k,),
                                    prepare=True)
            assert len(await cur.fetchall()) == 1

        for k in keys["local"][:50]:  # warm: the SQL workers started, the plan cached
            await by_sql(k)
        await (await sql.execute(GROUP_BY)).fetchall()
        medians = {}
        for where, ks in keys.items():
            ratios, seen = [], []
            for i in range(a.pairs):
                order = [("sql", by_sql), ("http", by_http)][:: 1 if i % 2 else -1]
                got = {name: await timed(call, ks, a.seconds) for name, call in order}
                ratios.append(got["sql"]["p50"] / got["http"]["p50"])
                seen.append(got)
            med = {n: statistics.median(g[n]["p50"] for g in seen) for n in ("sql", "http")}
            rps = {n: statistics.median(g[n]["rps"] for g in seen) for n in ("sql", "http")}
            medians[where] = statistics.median(ratios)
            print(f"lookup {where:9s} p50 SQL {med['sql']:.3f} ms ({rps['sql']:.0f}/s), "
                  f"HTTP {med['http']:.3f} ms ({rps['http']:.0f}/s); SQL/HTTP p50 median "
                  f"{medians[where]:.2f}x, pairs " + " ".join(f"{r:.2f}" for r in ratios),
                  flush=True)
        group_by = await aggregate(http, sql, a.agg_runs)
        print(f"targets: local lookup p50 SQL/HTTP {medians['local']:.2f}x (at most 1.0: "
              f"{'met' if medians['local'] <= 1.0 else 'NOT met'}); GROUP BY p50 "
              f"{group_by:.0f} ms (at most 200: {'met' if group_by <= 200 else 'NOT met'})",
              flush=True)
        await stall(http, sql_port, keys["local"], a)


async def aggregate(http: httpx.AsyncClient, sql: psycopg.AsyncConnection[Any],
                    runs: int) -> float:
    """The GROUP BY's p50 by SQL (ms), printed beside the HTTP aggregate's."""
    lat: dict[str, list[float]] = {"sql": [], "http": []}
    for i in range(runs):
        for name in (("sql", "http") if i % 2 else ("http", "sql")):
            t = time.perf_counter()
            if name == "sql":
                await (await sql.execute(GROUP_BY)).fetchall()
            else:
                r = await http.get("/v1/views/order_counts/aggregate", params=AGG)
                assert r.json()["status"] == "OK"
            lat[name].append((time.perf_counter() - t) * 1e3)
    print(f"GROUP BY type over order_counts: p50 SQL {pct(lat['sql'], 50):.1f} ms, "
          f"HTTP aggregate {pct(lat['http'], 50):.1f} ms ({runs} runs each)", flush=True)
    return pct(lat["sql"], 50)


class _Long(threading.Thread):
    """One long statement on a connection of its own, until cancelled."""

    def __init__(self, sql_port: int) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(host="127.0.0.1", port=sql_port, dbname="streamiq",
                                    password="any", sslmode="disable", autocommit=True)
        self.conn.execute("SET statement_timeout = '600s'")
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.conn.execute(LONG)
        except psycopg.Error as exc:
            self.error = exc

    def stop(self) -> None:
        self.conn.cancel()
        self.join(60)
        self.conn.close()


def _stop_all(long: list[_Long]) -> None:
    for t in long:
        t.stop()


async def _http_p50s(http: httpx.AsyncClient, keys: list[str], a: argparse.Namespace
                     ) -> tuple[float, float]:
    """HTTP lookups' p50 over ``--seconds`` (c=1), then aggregates' p50 (ms)."""

    async def by_http(k: str) -> None:
        assert (await http.get(f"/v1/views/balances/keys/{k}")).status_code == 200

    lookup = (await timed(by_http, keys, a.seconds))["p50"]
    lat = []
    for _ in range(a.stall_aggs):
        t = time.perf_counter()
        assert (await http.get("/v1/views/order_counts/aggregate", params=AGG)).status_code \
            == 200
        lat.append((time.perf_counter() - t) * 1e3)
    return lookup, pct(lat, 50)


async def stall(http: httpx.AsyncClient, sql_port: int, keys: list[str],
                a: argparse.Namespace) -> None:
    ratios: dict[str, list[float]] = {"lookup": [], "aggregate": []}
    health: list[float] = []
    for _ in range(a.stall_pairs):
        idle = await _http_p50s(http, keys, a)
        long = [_Long(sql_port) for _ in range(6)]
        for t in long:
            t.start()
        await asyncio.sleep(1.0)  # the statements reach the workers
        try:
            loaded = await _http_p50s(http, keys, a)
            t0 = time.perf_counter()
            assert (await http.get("/health")).status_code == 200
            health.append((time.perf_counter() - t0) * 1e3)
        finally:
            await asyncio.to_thread(_stop_all, long)
        assert all(t.error is not None for t in long), "a long statement ended by itself"
        ratios["lookup"].append(loaded[0] / idle[0])
        ratios["aggregate"].append(loaded[1] / idle[1])
        print(f"  idle: lookup p50 {idle[0]:.3f} ms, aggregate p50 {idle[1]:.1f} ms; six "
              f"long SQL statements running: {loaded[0]:.3f} ms, {loaded[1]:.1f} ms",
              flush=True)
    med = {k: statistics.median(v) for k, v in ratios.items()}
    print(f"six long SQL statements on the entry node: HTTP lookup p50 {med['lookup']:.2f}x "
          f"idle, aggregate p50 {med['aggregate']:.2f}x idle (median of {a.stall_pairs} "
          f"pairs; target at most 2x: {'met' if max(med.values()) <= 2 else 'NOT met'}); "
          f"/health answered in {max(health):.1f} ms at most", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--agg-runs", type=int, default=20)
    ap.add_argument("--stall-pairs", type=int, default=3)
    ap.add_argument("--stall-aggs", type=int, default=10)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-sql-"))
    broker = bench_broker().start()
    procs: list[NodeProc] = []
    try:
        bootstrap = broker.bootstrap_servers
        rows = data(a.keys)
        from changelog import produce_rows  # tests/: on the path with bench_queries

        for view in (BALANCES, ORDER_COUNTS):
            topic = f"bs-{view.changelog_topic}"
            ensure_topics({"bootstrap.servers": bootstrap}, {topic: 3})
            produce_rows(bootstrap, topic, view, rows[view.name])
        ports = [(free_port(), free_port()) for _ in range(3)]
        args = ["--bootstrap-servers", bootstrap, "--cluster", "bs", "--topic-prefix", "bs-",
                "--app", "bank,orders", "--state-dir", str(root / "state"),
                "--log-level", "warning", "--standby-replicas", "0"]
        procs = [NodeProc(p, [*args, "--sql-port", str(s)], root / f"node-{p}.log")
                 for p, s in ports]
        for p, _ in ports:
            wait_ready(p, 120)
        owners = wait_loaded(ports[0][0], a.keys)
        here = f"127.0.0.1:{ports[0][0]}"
        keys = [r["account"] for r in rows["balances"]][:20_000]
        split = {"local": [k for k in keys if owners[BALANCES.partition_of(k, 3)] == here],
                 "forwarded": [k for k in keys if owners[BALANCES.partition_of(k, 3)] != here]}
        asyncio.run(lookups(ports[0][0], ports[0][1], split, a))
    finally:
        for n in procs:
            n.stop()
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
