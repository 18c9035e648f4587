"""SQL over the PostgreSQL wire on 3 real nodes (issue 26): psycopg against every node's
--sql-port answers as the HTTP API does, and as what was written.

Rows are produced straight to the changelog topics (tests/changelog.py): no Spark. Client
authentication is on: the password is the client token, which the owners check again
when a node forwards a statement's read.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from certs import tls_files
from changelog import produce_rows
from procs import free_port
from updemo import until

from streamiq.kafka.admin import ensure_topics
from streamiq.views.bank import BALANCES
from streamiq.views.base import View
from streamiq.views.orders import ORDER_COUNTS

pytestmark = pytest.mark.integration

BAL: list[dict[str, Any]] = [
    {"account": f"acc-{i:03d}", "balance": (i * 37) % 500 - 100, "count": i % 7 + 1,
     "last_update": 1_700_000_000_000 + i} for i in range(60)]
ORDERS: list[dict[str, Any]] = [
    {"store": f"st{s:02d}", "type": t, "count": s + n + 1, "revenue": s * 2.5 + n}
    for s in range(20) for n, t in enumerate(("GENERAL", "RESTAURANT"))]


def _produce(cluster: Any, view: View, rows: list[dict[str, Any]]) -> None:
    topic = cluster.topic(view.changelog_topic)
    ensure_topics({"bootstrap.servers": cluster.bootstrap}, {topic: 3})
    produce_rows(cluster.bootstrap, topic, view, rows)


@pytest.fixture
def nodes(cluster: Any) -> Iterator[list[tuple[int, int]]]:
    """3 nodes serving bank and orders, each with its SQL port: [(http, sql)]."""
    cluster.auth = True
    _produce(cluster, BALANCES, BAL)
    _produce(cluster, ORDER_COUNTS, ORDERS)
    started = []
    for _ in range(3):
        sql = free_port()
        port, p = cluster.node("bank,orders", extra=["--standby-replicas", "0",
                                                     "--sql-port", str(sql)], wait=False)
        started.append((port, sql, p))
    for port, _, p in started:
        p.wait_ready(f"http://127.0.0.1:{port}/health", 60)
    ports = [port for port, _, _ in started]
    cluster.settle(ports, "balances")
    cluster.settle(ports, "order_counts")
    for view, n in (("balances", len(BAL)), ("order_counts", len(ORDERS))):
        until(partial(_loaded, cluster, ports[0], view, n), 60, f"{view} loaded")
    yield [(port, sql) for port, sql, _ in started]


def _loaded(cluster: Any, port: int, view: str, n: int) -> bool:
    groups: list[dict[str, int]] = _http(cluster, port, f"/v1/views/{view}/aggregate")["groups"]
    return groups == [{"count(*)": n}]


def _counted(conn: psycopg.Connection[Any], n: int) -> bool:
    return conn.execute("SELECT count(*) FROM balances").fetchall() == [(n,)]


def _http(cluster: Any, port: int, path: str, **kw: Any) -> Any:
    method = "POST" if "json" in kw else "GET"
    r = httpx.request(method, f"http://127.0.0.1:{port}{path}", headers=cluster.headers,
                      timeout=10, **kw)
    assert r.status_code == 200, (path, r.status_code, r.text)
    return r.json()


def _connect(sql_port: int, password: str) -> psycopg.Connection[Any]:
    return psycopg.connect(host="127.0.0.1", port=sql_port, user="tests", dbname="streamiq",
                           password=password, sslmode="disable", autocommit=True,
                           connect_timeout=10)


def _metric(cluster: Any, port: int, name: str) -> float:
    """A node's metric, summed over the series whose line starts with ``name``."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", headers=cluster.headers,
                     timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name))


def _forwarded(cluster: Any, port: int) -> float:
    return _metric(cluster, port, "streamiq_forwarded_answers_total")


def test_sql_on_three_nodes(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """One cluster start (3 nodes) for the three checks."""
    _equals_the_http_api(cluster, nodes)
    _a_bad_password_is_refused(cluster, nodes)
    _psql_lists_and_queries(cluster, nodes[-1][1])
    _a_lookup_takes_at_most_one_hop(cluster, nodes)


def _equals_the_http_api(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """Lookup, IN, LIKE and GROUP BY from every node: the HTTP API's answers, and the
    rows written."""
    truth = {str(r["account"]): r for r in BAL}
    keys = sorted(truth)
    for port, sql in nodes:
        with _connect(sql, cluster.token) as conn:
            for key in keys[::7]:  # lookup
                got = conn.execute("SELECT account, balance, count FROM balances "
                                   "WHERE account = %s", (key,)).fetchall()
                http = _http(cluster, port, f"/v1/views/balances/keys/{key}")["value"]
                assert got == [(key, http["balance"], http["count"])], (port, key)
                assert http["balance"] == truth[key]["balance"]
            asked = [*keys[1:30:4], "acc-none"]  # IN: a multi-get
            got_in = conn.execute("SELECT account, balance FROM balances WHERE account IN ("
                                  + ",".join(f"'{k}'" for k in asked) + ") ORDER BY account"
                                  ).fetchall()
            mg = _http(cluster, port, "/v1/views/balances/keys", json={"keys": asked})
            http_rows = sorted((r["key"], r["value"]["balance"])
                               for r in mg["results"] if r["found"])
            assert got_in == http_rows == [(k, truth[k]["balance"]) for k in asked[:-1]]
            like = conn.execute("SELECT account FROM balances WHERE account LIKE 'acc-01%' "
                                "ORDER BY account").fetchall()
            scan = _http(cluster, port, "/v1/views/balances/scan",
                         params={"prefix": "acc-01", "limit": 100})
            assert [a for (a,) in like] == [r["key"] for r in scan["rows"]] == [
                k for k in keys if k.startswith("acc-01")]
            groups = conn.execute("SELECT type, count(*), sum(count) FROM order_counts "
                                  "GROUP BY type ORDER BY type").fetchall()
            agg = _http(cluster, port, "/v1/views/order_counts/aggregate",
                        params={"group_by": "type", "agg": ["count(*)", "sum(count)"]})
            assert groups == [(g["type"], g["count(*)"], g["sum(count)"])
                              for g in agg["groups"]]
            assert groups == [(t, 20, sum(r["count"] for r in ORDERS if r["type"] == t))
                              for t in ("GENERAL", "RESTAURANT")]


def _psql_lists_and_queries(cluster: Any, sql_port: int) -> None:
    """psql (Debian's postgresql-client) against a real node: its tables and a query."""
    psql = shutil.which("psql")
    assert psql is not None, "psql is needed: apt-get install postgresql-client"
    dsn = f"host=127.0.0.1 port={sql_port} dbname=streamiq password={cluster.token}"
    out = subprocess.run([psql, dsn, "-X", "-A", "-t", "-c", r"\dt", "-c",
                          "SELECT type, count(*) FROM order_counts GROUP BY type ORDER BY 1"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    tables = {line.split("|")[1] for line in out.stdout.splitlines() if "|table|" in line}
    assert tables == {"balances", "order_counts", "order_counts_1m"}, out.stdout
    assert out.stdout.splitlines()[-2:] == ["GENERAL|20", "RESTAURANT|20"], out.stdout


def _a_bad_password_is_refused(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """Refused, and counted on the node's /metrics."""
    for port, sql in nodes:
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            _connect(sql, "not-a-token")
        assert _metric(cluster, port, 'streamiq_sql_errors_total{scope="connection",'
                                      'sqlstate="28P01"}') == 1


def _a_lookup_takes_at_most_one_hop(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """Each lookup from node 0 is answered there or relayed from its owner once: the
    others forward nothing (a forwarded lookup is answered or refused, never passed on)."""
    ports = [port for port, _ in nodes]
    before = [_forwarded(cluster, p) for p in ports]
    asked = [r["account"] for r in BAL[:15]]
    with _connect(nodes[0][1], cluster.token) as conn:
        for key in asked:
            assert conn.execute("SELECT count FROM balances WHERE account = %s",
                                (key,)).fetchall() == [(next(
                                    r["count"] for r in BAL if r["account"] == key),)]
    after = [_forwarded(cluster, p) for p in ports]
    relayed = after[0] - before[0]
    assert 1 <= relayed <= len(asked), (before, after)  # some keys are owned elsewhere
    assert after[1:] == before[1:], (before, after)


def test_sql_over_tls_between_two_nodes(cluster: Any, tmp_path: Path) -> None:
    """Nodes with a certificate take TLS SQL connections only (verify-full against the
    CA), and answer lookups owned by the other node (hops over TLS)."""
    files = tls_files(tmp_path)
    _produce(cluster, BALANCES, BAL)
    tls = ["--tls-cert-file", str(files["cert"]), "--tls-key-file", str(files["key"]),
           "--tls-ca-file", str(files["ca"]), "--standby-replicas", "0"]
    started = [(*cluster.node("bank", extra=[*tls, "--sql-port", str(sql)], wait=False), sql)
               for sql in (free_port(), free_port())]
    for port, p, _ in started:
        p.wait_ready(f"https://127.0.0.1:{port}/health", 60, verify=str(files["ca"]))
    cluster.settle([port for port, _, _ in started], "balances", ca=str(files["ca"]))
    for _, _, sql in started:
        with psycopg.connect(host="127.0.0.1", port=sql, dbname="streamiq", password="any",
                             sslmode="verify-full", sslrootcert=str(files["ca"]),
                             autocommit=True, connect_timeout=10) as conn:
            until(partial(_counted, conn, len(BAL)), 60, "balances loaded")
            got: dict[str, int] = {}
            for r in BAL:
                got.update(conn.execute("SELECT account, balance FROM balances "
                                        "WHERE account = %s", (r["account"],)).fetchall())
            assert got == {r["account"]: r["balance"] for r in BAL}
        with pytest.raises(psycopg.OperationalError, match="requires TLS"):
            psycopg.connect(host="127.0.0.1", port=sql, dbname="streamiq", password="any",
                            sslmode="disable", connect_timeout=10)
