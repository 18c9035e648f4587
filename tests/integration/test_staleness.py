"""A staleness bound (``max_staleness_ms``) on every query type, from every node, in
real-time mode with hour-long batches (no marker helps): a read sent at once after a
write's acknowledgement with ``max_staleness_ms=0`` ("everything appended before I
asked") shows the write on every node, through every query type. Each answering replica
proves the bound with ticks it writes itself (``Node.recent_input``); nobody sends a
position. The same reads without the bound, sent first, miss writes (the check can
fail).

A view without ticks (a windowed one) refuses the bound with a 400 naming it, and a
bound out of range is a 400 naming it too.
"""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest
from procs import free_port
from updemo import until

pytestmark = pytest.mark.integration

ACCOUNTS = [f"st-{i}" for i in range(4)]
BOUND = {"max_staleness_ms": 0, "wait_ms": 60_000}


def _reads(c: httpx.Client, port: int, account: str, bound: dict[str, Any]
           ) -> dict[str, Any]:
    """The account's balance, and the four accounts by multi-get, scan and aggregate."""
    base = f"http://127.0.0.1:{port}/v1/views/balances"
    one = c.get(f"http://127.0.0.1:{port}/account/{account}", params=bound)
    many = c.post(f"{base}/keys", params=bound, json={"keys": ACCOUNTS})
    scan = c.get(f"{base}/scan", params={**bound, "prefix": "st-"})
    total = c.get(f"{base}/aggregate", params={**bound, "prefix": "st-",
                                               "agg": "sum(balance)"})
    for r in (many, scan, total):
        assert r.status_code == 200, (port, r.request.url, r.text[:300])
    assert one.status_code in ((200,) if bound else (200, 404)), (port, one.text[:300])
    return {"one": one.json()["value"]["balance"] if one.status_code == 200 else None,
            "many": {x["key"]: x["value"]["balance"] for x in many.json()["results"]
                     if x["found"]},
            "scan": {x["key"]: x["value"]["balance"] for x in scan.json()["rows"]},
            "sum": int(total.json()["groups"][0]["sum(balance)"] or 0)}


def test_every_query_type_honours_a_staleness_bound_on_every_node(cluster: Any) -> None:
    pipe = cluster.pipeline("bank,orders", extra=["--realtime-batch-s", "3600"], wait=False)
    ingest, _ = cluster.ingest("bank,orders")
    sql_ports = [free_port() for _ in range(3)]
    started = [cluster.node("bank,orders", extra=["--sql-port", str(s)], wait=False)
               for s in sql_ports]
    for port, proc in started:
        proc.wait_ready(f"http://127.0.0.1:{port}/health", 60)
    ports = [p for p, _ in started]
    cluster.pipeline_ready(pipe)
    totals: dict[str, int] = {}
    with httpx.Client(timeout=90) as c:
        def post(account: str, amount: int) -> None:
            r = c.post(f"http://127.0.0.1:{ingest}/account/{account}",
                       params={"amount": amount})
            assert r.status_code == 200, r.text
            totals[account] = totals.get(account, 0) + amount

        post("warmup", 1)  # the first rows through the query, waited for once
        until(lambda: c.get(f"http://127.0.0.1:{ports[0]}/account/warmup").status_code
              == 200, 180, "the first write visible")
        del totals["warmup"]
        missed = 0
        for i in range(12):
            account = ACCOUNTS[i % len(ACCOUNTS)]
            post(account, i + 1)
            port = ports[i % len(ports)]
            want = {"one": totals[account], "many": totals, "scan": totals,
                    "sum": sum(totals.values())}
            plain = _reads(c, port, account, {})  # sent first, at once: may miss
            missed += sum(plain[k] != want[k] for k in want)
            got = _reads(c, port, account, BOUND)
            assert got == want, (i, got, totals)
        assert missed > 0, "no plain read missed a write: the check proves nothing"

        # SQL: the session's setting bounds every statement the same way
        listed = ", ".join(f"'{a}'" for a in ACCOUNTS)
        for i, sql in enumerate(sql_ports):
            with psycopg.connect(host="127.0.0.1", port=sql, dbname="streamiq",
                                 password="any", autocommit=True) as conn:
                conn.execute("SET streamiq.max_staleness_ms = 0")
                conn.execute("SET streamiq.wait_ms = 60000")
                post(ACCOUNTS[i], 100 + i)
                total = conn.execute(f"SELECT sum(balance) FROM balances "
                                     f"WHERE account IN ({listed})").fetchone()
                one = conn.execute("SELECT balance FROM balances WHERE account = %s",
                                   (ACCOUNTS[i],)).fetchone()
                assert total is not None and int(total[0]) == sum(totals.values()), (sql, total)
                assert one is not None and int(one[0]) == totals[ACCOUNTS[i]], (sql, one)

        windowed = c.get(f"http://127.0.0.1:{ports[0]}/v1/views/order_counts_1m/keys/"
                         "s|GENERAL/windows", params={"max_staleness_ms": 10})
        assert windowed.status_code == 400, (windowed.text, c.get(
            f"http://127.0.0.1:{ports[0]}/v1/views").text)
        assert windowed.json()["field"] == "max_staleness_ms", windowed.text
        for bad in ("-1", "x", str(3_600_001)):
            r = c.get(f"http://127.0.0.1:{ports[1]}/account/st-0",
                      params={"max_staleness_ms": bad})
            assert r.status_code == 400 and "max_staleness_ms" in r.text, (bad, r.text)
