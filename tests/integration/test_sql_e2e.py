"""SQL over the PostgreSQL wire on 3 real nodes (issue 26): psycopg and psql against
every node's --sql-port answer as the HTTP API does, and as what was written.

Rows are produced straight to the changelog topics (tests/sqlnodes.py): no Spark. Client
authentication is on: the password is the client token, which the owners check again
when a node forwards a statement's read. Every query shape of the issue, from every
node; an aggregate asks each other owner for one part and a lookup takes at most one hop
(the nodes' /metrics). Passwords, scopes, errors, SQLAlchemy and position tokens:
test_sql_e2e_more.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest
from certs import tls_files
from procs import free_port
from sqlnodes import (
    BAL,
    ORDERS,
    T0,
    WINDOWS,
    connect,
    http,
    metric,
    metrics,
    owners,
    produce,
    psql,
    scan_all,
    start_nodes,
)
from updemo import until

from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration

Data = dict[str, list[dict[str, Any]]]
VIEWS = ["balances", "order_counts", "order_counts_1m"]
TRUTH: Data = {"balances": BAL, "order_counts": ORDERS, "order_counts_1m": WINDOWS}


@pytest.fixture
def nodes(cluster: Any) -> Iterator[list[tuple[int, int]]]:
    """3 nodes serving bank and orders, each with its SQL port: [(http, sql)]."""
    yield start_nodes(cluster)


def _counted(conn: psycopg.Connection[Any], n: int) -> bool:
    return conn.execute("SELECT count(*) FROM balances").fetchall() == [(n,)]


def _forwarded(cluster: Any, port: int) -> float:
    return metric(cluster, port, "streamiq_forwarded_answers_total")


def test_sql_on_three_nodes(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """One cluster start (3 nodes) for the checks."""
    _equals_the_http_api(cluster, nodes)
    _every_other_shape_equals_the_http_api(cluster, nodes)
    _an_aggregate_asks_each_other_owner_once(cluster, nodes)
    _a_bad_password_is_refused(cluster, nodes)
    _psql_lists_and_queries(cluster, nodes[-1][1])
    _a_lookup_takes_at_most_one_hop(cluster, nodes)
    _order_by_limit_is_the_top_k(cluster, nodes)


def _equals_the_http_api(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """Lookup, IN, LIKE and GROUP BY from every node: the HTTP API's answers, and the
    rows written."""
    truth = {str(r["account"]): r for r in BAL}
    keys = sorted(truth)
    for port, sql in nodes:
        with connect(sql, cluster.token) as conn:
            for key in keys[::7]:  # lookup
                got = conn.execute("SELECT account, balance, count FROM balances "
                                   "WHERE account = %s", (key,)).fetchall()
                value = http(cluster, port, f"/v1/views/balances/keys/{key}")["value"]
                assert got == [(key, value["balance"], value["count"])], (port, key)
                assert value["balance"] == truth[key]["balance"]
            asked = [*keys[1:30:4], "acc-none"]  # IN: a multi-get
            got_in = conn.execute("SELECT account, balance FROM balances WHERE account IN ("
                                  + ",".join(f"'{k}'" for k in asked) + ") ORDER BY account"
                                  ).fetchall()
            mg = http(cluster, port, "/v1/views/balances/keys", json={"keys": asked})
            http_rows = sorted((r["key"], r["value"]["balance"])
                               for r in mg["results"] if r["found"])
            assert got_in == http_rows == [(k, truth[k]["balance"]) for k in asked[:-1]]
            like = conn.execute("SELECT account FROM balances WHERE account LIKE 'acc-01%' "
                                "ORDER BY account").fetchall()
            scan = http(cluster, port, "/v1/views/balances/scan",
                        params={"prefix": "acc-01", "limit": 100})
            assert [a for (a,) in like] == [r["key"] for r in scan["rows"]] == [
                k for k in keys if k.startswith("acc-01")]
            groups = conn.execute("SELECT type, count(*), sum(count) FROM order_counts "
                                  "GROUP BY type ORDER BY type").fetchall()
            agg = http(cluster, port, "/v1/views/order_counts/aggregate",
                       params={"group_by": "type", "agg": ["count(*)", "sum(count)"]})
            assert groups == [(g["type"], g["count(*)"], g["sum(count)"])
                              for g in agg["groups"]]
            assert groups == [(t, 20, sum(r["count"] for r in ORDERS if r["type"] == t))
                              for t in ("GENERAL", "RESTAURANT")]


def _ranked(d: Data) -> list[tuple[Any, ...]]:
    """rank() by count (descending) and a running sum of count by store, per type."""
    out = []
    for r in d["order_counts"]:
        same = [o for o in d["order_counts"] if o["type"] == r["type"]]
        out.append((r["type"], r["store"], r["count"],
                    1 + sum(o["count"] > r["count"] for o in same),
                    sum(o["count"] for o in same if o["store"] <= r["store"])))
    return sorted(out)


#: (statement, its answer computed from the views' rows), every one with rows
SHAPES: list[tuple[str, Callable[[Data], list[tuple[Any, ...]]]]] = [
    ("SELECT account, balance FROM balances WHERE account >= 'acc-020' AND account < 'acc-035' "
     "ORDER BY account", lambda d: sorted((r["account"], r["balance"]) for r in d["balances"]
                                          if "acc-020" <= r["account"] < "acc-035")),
    ("SELECT store, type, count FROM order_counts WHERE store <= 'st06' AND store > 'st03' "
     "ORDER BY store, type", lambda d: sorted((r["store"], r["type"], r["count"])
                                              for r in d["order_counts"]
                                              if "st03" < r["store"] <= "st06")),
    ("SELECT o.store, o.type, o.revenue, w.window_start, w.count FROM order_counts o "
     "JOIN order_counts_1m w ON w.store = o.store AND w.type = o.type WHERE o.store >= 'st03' "
     "ORDER BY 1, 2, 4", lambda d: sorted(
         (o["store"], o["type"], o["revenue"], w["window_start"], w["count"])
         for o in d["order_counts"] for w in d["order_counts_1m"]
         if (w["store"], w["type"]) == (o["store"], o["type"]) and o["store"] >= "st03")),
    ("SELECT account, balance FROM balances ORDER BY balance DESC LIMIT 5 OFFSET 3",
     lambda d: sorted(((r["account"], r["balance"]) for r in d["balances"]),
                      key=lambda r: -r[1])[3:8]),
    ("SELECT account, balance * 2 + count AS x, CASE WHEN balance < 0 THEN 'debt' ELSE 'ok' "
     "END AS s FROM balances WHERE account LIKE 'acc-02%' ORDER BY account",
     lambda d: sorted((r["account"], r["balance"] * 2 + r["count"],
                       "debt" if r["balance"] < 0 else "ok")
                      for r in d["balances"] if r["account"].startswith("acc-02"))),
    ("SELECT type, store, count, rank() OVER (PARTITION BY type ORDER BY count DESC), "
     "sum(count) OVER (PARTITION BY type ORDER BY store) FROM order_counts ORDER BY 1, 2",
     _ranked),
    ("SELECT count, count(DISTINCT substr(account, 1, 6)) FROM balances GROUP BY count "
     "ORDER BY count", lambda d: sorted(
         (c, len({r["account"][:6] for r in d["balances"] if r["count"] == c}))
         for c in {r["count"] for r in d["balances"]})),
]


def _through_http(cluster: Any, port: int) -> Data:
    """Every row of the views, through one node's HTTP scans."""
    got = {v: [r["value"] for r in scan_all(cluster, port, f"/v1/views/{v}/scan")]
           for v in VIEWS[:2]}
    return {**got, "order_counts_1m": [
        r["value"] for r in scan_all(cluster, port, "/v1/views/order_counts_1m/windows")]}


def _every_other_shape_equals_the_http_api(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """A first-column range, a join, ORDER BY + LIMIT/OFFSET, an expression, window
    functions, count(DISTINCT) and a windowed view's lookup, from every node: what the
    same node's HTTP API answers (its range scan, its key's windows; the statement over
    the rows its scans return where HTTP has no such query) and the rows written."""
    window = "SELECT store, type, window_start, window_end, count, revenue FROM order_counts_1m"
    for port, sql in nodes:
        over_http = _through_http(cluster, port)
        with connect(sql, cluster.token) as conn:
            for statement, answer in SHAPES:
                got = conn.execute(statement).fetchall()
                assert got == answer(over_http) == answer(TRUTH), (port, statement)
                assert got, statement
            assert conn.execute("SELECT account FROM balances WHERE account BETWEEN "
                                "'acc-030' AND 'acc-020'").fetchall() == []  # an empty range
            scan = http(cluster, port, "/v1/views/balances/scan",
                        params={"from": "acc-020", "to": "acc-035", "limit": 100})["rows"]
            assert conn.execute(SHAPES[0][0]).fetchall() == [
                (r["key"], r["value"]["balance"]) for r in scan]
            scan = http(cluster, port, "/v1/views/order_counts/scan",
                        params={"from": "st04", "to": "st07", "limit": 100})["rows"]
            assert conn.execute(SHAPES[1][0]).fetchall() == [
                (r["value"]["store"], r["value"]["type"], r["value"]["count"]) for r in scan]
            for store, kind in (("st01", "GENERAL"), ("st03", "GENERAL"), ("st06", "RESTAURANT"),
                                ("st03", "RESTAURANT")):  # 1, 3, 3 and no windows
                key, cols = f"{store}|{kind}", ("store", "type", "window_start", "window_end",
                                                "count", "revenue")
                truth = sorted(tuple(w[c] for c in cols) for w in WINDOWS
                               if (w["store"], w["type"]) == (store, kind))
                for since in (0, T0 + 60_000):
                    got = conn.execute(f"{window} WHERE store = %s AND type = %s AND "
                                       "window_start >= %s", (store, kind, since)).fetchall()
                    windows = http(cluster, port, f"/v1/views/order_counts_1m/keys/{key}/windows",
                                   params={"from": since})["windows"]
                    assert sorted(got) == [tuple(w[c] for c in cols) for w in windows] == [
                        w for w in truth if w[2] >= since], (port, key, since)
                got = conn.execute(f"{window} WHERE store = %s AND type = %s",
                                   (store, kind)).fetchall()  # the lookup's rows as they come
                assert sorted(got) == truth, (port, key)


def _peer_parts(cluster: Any, port: int) -> dict[str, float]:
    """Requests a node answered for a peer (a part of another node's query), by query."""
    return {m[1]: float(m[2]) for m in re.finditer(
        r'^streamiq_request_duration_seconds_count\{query="([^"]+)",served="peer"\} (\S+)$',
        metrics(cluster, port), re.MULTILINE)}


def _an_aggregate_asks_each_other_owner_once(cluster: Any,
                                             nodes: list[tuple[int, int]]) -> None:
    """A GROUP BY from any node is pushed down: each other node owning partitions of the
    view answers exactly one aggregate part (all its partitions at once), and nothing
    else; a node owning none is not asked."""
    ports = [p for p, _ in nodes]
    for view in VIEWS[1:]:
        owning = set(owners(cluster, ports[0], view).values())
        truth = [(t, sum(r["count"] for r in TRUTH[view] if r["type"] == t),
                  sum(r["type"] == t for r in TRUTH[view])) for t in ("GENERAL", "RESTAURANT")]
        for port, sql in nodes:
            with connect(sql, cluster.token) as conn:
                before = [_peer_parts(cluster, p) for p in ports]
                pushed = metric(cluster, port, 'streamiq_sql_statements_total{kind="aggregate"}')
                got = conn.execute(f"SELECT type, sum(count), count(*) FROM {view} "
                                   "GROUP BY type ORDER BY type").fetchall()
                after = [_peer_parts(cluster, p) for p in ports]
            assert got == truth, (view, port)
            asked = [{q: n - b.get(q, 0) for q, n in a.items() if n != b.get(q, 0)}
                     for b, a in zip(before, after, strict=True)]
            assert asked == [{"aggregate": 1} if p in owning and p != port else {}
                             for p in ports], (view, port, owning)
            assert metric(cluster, port, 'streamiq_sql_statements_total{kind="aggregate"}'
                          ) == pushed + 1


def _order_by_limit_is_the_top_k(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """``ORDER BY balance DESC LIMIT 10`` from any node is the owners' top-k (issue 39):
    the 10 largest balances, each other owner asked one top-k part and nothing else."""
    ports = [p for p, _ in nodes]
    owning = set(owners(cluster, ports[0], "balances").values())
    truth = {(r["account"], r["balance"]) for r in BAL}
    largest = sorted((b for _, b in truth), reverse=True)[:10]
    for port, sql in nodes:
        with connect(sql, cluster.token) as conn:
            before = [_peer_parts(cluster, p) for p in ports]
            pushed = metric(cluster, port, 'streamiq_sql_statements_total{kind="topk"}')
            got = conn.execute("SELECT account, balance FROM balances "
                               "ORDER BY balance DESC LIMIT 10").fetchall()
            after = [_peer_parts(cluster, p) for p in ports]
        assert [b for _, b in got] == largest and set(got) <= truth, (port, got)
        asked = [{q: n - b.get(q, 0) for q, n in a.items() if n != b.get(q, 0)}
                 for b, a in zip(before, after, strict=True)]
        assert asked == [{"topk": 1} if p in owning and p != port else {}
                         for p in ports], (port, owning)
        assert metric(cluster, port, 'streamiq_sql_statements_total{kind="topk"}'
                      ) == pushed + 1


def _a_bad_password_is_refused(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """Refused, and counted on the node's /metrics."""
    for port, sql in nodes:
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            connect(sql, "not-a-token")
        assert metric(cluster, port, 'streamiq_sql_errors_total{scope="connection",'
                                     'sqlstate="28P01"}') == 1


def _psql_lists_and_queries(cluster: Any, sql_port: int) -> None:
    """psql against a real node: its tables, a query, and errors (simple query protocol)
    that leave the connection usable."""
    out = psql(sql_port, cluster.token, r"\dt",
                "SELECT type, count(*) FROM order_counts GROUP BY type ORDER BY 1")
    assert out.returncode == 0, out.stderr
    tables = {line.split("|")[1] for line in out.stdout.splitlines() if "|table|" in line}
    assert tables == set(VIEWS), out.stdout
    assert out.stdout.splitlines()[-2:] == ["GENERAL|20", "RESTAURANT|20"], out.stdout
    out = psql(sql_port, cluster.token, "selec 1", "SELECT * FROM nope",
                "SELECT account FROM balances WHERE account = 'acc-007'")
    assert "ERROR:  42601: syntax error" in out.stderr, out.stderr
    assert 'ERROR:  42P01: relation "nope" does not exist' in out.stderr, out.stderr
    assert out.stdout.splitlines() == ["acc-007"], (out.stdout, out.stderr)


def _a_lookup_takes_at_most_one_hop(cluster: Any, nodes: list[tuple[int, int]]) -> None:
    """Each lookup from node 0 is answered there or relayed from its owner once: the
    others forward nothing (a forwarded lookup is answered or refused, never passed on)."""
    ports = [port for port, _ in nodes]
    before = [_forwarded(cluster, p) for p in ports]
    asked = [r["account"] for r in BAL[:15]]
    with connect(nodes[0][1], cluster.token) as conn:
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
    produce(cluster, BALANCES, BAL)
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
