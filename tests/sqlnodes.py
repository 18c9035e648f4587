"""Three real nodes serving bank and orders with SQL ports, over rows produced straight
to the changelog topics (no Spark), and the HTTP and SQL helpers the SQL end-to-end
tests share (tests/integration/test_sql_e2e*.py)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from functools import partial
from typing import Any

import httpx
import psycopg
from changelog import produce_rows
from procs import HTTP, Proc, free_port
from updemo import until

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES
from streamiq.views.base import View
from streamiq.views.orders import ORDER_COUNTS, ORDER_COUNTS_1M

__all__ = ["BAL", "ORDERS", "T0", "WINDOWS", "connect", "http", "metric", "metrics", "owners",
           "produce", "psql", "scan_all", "start_nodes", "start_sql_nodes"]

T0 = 1_700_000_040_000  # a minute's start (epoch ms)
BAL: list[dict[str, Any]] = [
    {"account": f"acc-{i:03d}", "balance": (i * 37) % 500 - 100, "count": i % 7 + 1,
     "last_update": 1_700_000_000_000 + i} for i in range(60)]
ORDERS: list[dict[str, Any]] = [
    {"store": f"st{s:02d}", "type": t, "count": s + n + 1, "revenue": s * 2.5 + n}
    for s in range(20) for n, t in enumerate(("GENERAL", "RESTAURANT"))]
#: 1-minute windows of order_counts_1m: 0 to 3 per (store, type) of the first 8 stores
WINDOWS: list[dict[str, Any]] = [
    {"store": f"st{s:02d}", "type": t, "window_start": T0 + w * 60_000,
     "window_end": T0 + (w + 1) * 60_000, "count": s * 3 + w + n, "revenue": s + w * 0.5}
    for s in range(8) for n, t in enumerate(("GENERAL", "RESTAURANT"))
    for w in range((s + n) % 4)]


def produce(cluster: Any, view: View, rows: list[dict[str, Any]]) -> None:
    topic = cluster.topic(view.changelog_topic)
    ensure_topics({"bootstrap.servers": cluster.bootstrap}, {topic: 3})
    produce_rows(cluster.bootstrap, topic, view, rows)


def start_nodes(cluster: Any) -> list[tuple[int, int]]:
    """3 nodes serving bank and orders (authentication on, no standbys), each with its
    SQL port, every view loaded: [(http port, sql port)]."""
    return [(port, sql) for port, sql, _ in start_sql_nodes(cluster)]


def start_sql_nodes(cluster: Any, n: int = 3, extra: Sequence[str] = ()
                    ) -> list[tuple[int, int, Proc]]:
    """``n`` nodes as ``start_nodes`` starts them, with ``extra`` flags: [(http port, sql
    port, process)]."""
    cluster.auth = True
    data = ((BALANCES, BAL), (ORDER_COUNTS, ORDERS), (ORDER_COUNTS_1M, WINDOWS))
    for view, rows in data:
        produce(cluster, view, rows)
    started = []
    for _ in range(n):
        sql = free_port()
        port, p = cluster.node("bank,orders", extra=["--standby-replicas", "0",
                                                     "--sql-port", str(sql), *extra],
                               wait=False)
        started.append((port, sql, p))
    for port, _, p in started:
        p.wait_ready(f"http://127.0.0.1:{port}/health", 60)
    ports = [port for port, _, _ in started]
    for view, rows in data:
        cluster.settle(ports, view.name)
        until(partial(_loaded, cluster, ports[0], view.name, len(rows)), 60,
              f"{view.name} loaded")
    return started


def _loaded(cluster: Any, port: int, view: str, n: int) -> bool:
    groups: list[dict[str, int]] = http(cluster, port, f"/v1/views/{view}/aggregate")["groups"]
    return groups == [{"count(*)": n}]


def http(cluster: Any, port: int, path: str, **kw: Any) -> Any:
    method = "POST" if "json" in kw else "GET"
    r = httpx.request(method, f"http://127.0.0.1:{port}{path}", headers=cluster.headers,
                      timeout=10, **kw)
    assert r.status_code == 200, (path, r.status_code, r.text)
    return r.json()


def scan_all(cluster: Any, port: int, path: str, **params: Any) -> list[dict[str, Any]]:
    """Every row of a paged HTTP scan (``path``: .../scan or .../windows), in its order."""
    rows: list[dict[str, Any]] = []
    cursor = None
    while True:
        page = http(cluster, port, path, params={**params, "limit": 50,
                                                 **({"cursor": cursor} if cursor else {})})
        assert page["status"] == "OK", page
        rows += page["rows"]
        cursor = page["next_cursor"]
        if cursor is None:
            return rows


def connect(sql_port: int, password: str) -> psycopg.Connection[Any]:
    return psycopg.connect(host="127.0.0.1", port=sql_port, user="tests", dbname="streamiq",
                           password=password, sslmode="disable", autocommit=True,
                           connect_timeout=10)


def metrics(cluster: Any, port: int) -> str:
    """A node's /metrics document."""
    return HTTP.get(f"http://127.0.0.1:{port}/metrics", headers=cluster.headers,
                    timeout=10).text


def metric(cluster: Any, port: int, name: str) -> float:
    """A node's metric, summed over the series whose line starts with ``name``."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics(cluster, port).splitlines()
               if line.startswith(name))


def owners(cluster: Any, port: int, view: str) -> dict[int, int]:
    """Partition -> the HTTP port of its active replica, from a node's /v1/cluster."""
    meta = http(cluster, port, "/v1/cluster")
    return {int(p): int(pv["replicas"][0]["address"].rsplit(":", 1)[1])
            for p, pv in meta["views"][view].items()}


def psql(sql_port: int, token: str, *commands: str) -> subprocess.CompletedProcess[str]:
    """psql (Debian's postgresql-client) running ``commands`` on one connection."""
    found = shutil.which("psql")
    assert found is not None, "psql is needed: apt-get install postgresql-client"
    dsn = f"host=127.0.0.1 port={sql_port} dbname=streamiq password={token}"
    args = [found, dsn, "-X", "-A", "-t", "-v", "VERBOSITY=verbose"]
    for c in commands:
        args += ["-c", c]
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
