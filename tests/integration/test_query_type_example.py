"""A query type added from outside the product (issue 48): the ``--views-module`` a node
loads defines it, with a ``float`` and a ``bool`` field, and its three declarations
(the query type with its runner, one route, one planner rule). Two real nodes then
carry it between them on the peer protocol (each owner answers its partitions' part),
answer it over HTTP (its parameters read as their types, a bad one a 400 naming it)
and as SQL's pushdown of ``WHERE column >= x`` (psycopg; the statements counted by their
kind), with no file of the product changed."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlnodes import BAL, connect, metric, start_sql_nodes

pytestmark = pytest.mark.integration

MODULE = '''
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from streamiq.serving.engines._json import loads_row
from streamiq.serving.query.gather import Gather
from streamiq.serving.query.model import Caller, Query
from streamiq.serving.query.run import Queries, runs
from streamiq.serving.routes import Route, declare
from streamiq.serving.sql.rules import NUMERIC, asks_only, pushdown
from streamiq.views.base import load_app

APP = load_app("bank,orders")


@dataclass(frozen=True)
class AtLeast(Query):
    """The rows whose column is at least a threshold (or above it, not inclusive)."""

    kind = "at_least"
    column: str
    threshold: float
    inclusive: bool = True


@dataclass(frozen=True)
class AtLeastRows:
    rows: list[dict[str, Any]]
    count: int


def _part(q: AtLeast, store: Any, held: list[int]) -> dict[str, Any]:
    rows = []
    for p in held:
        for key, raw in store.scan(p, None, None):
            row = loads_row(raw)
            v = row.get(q.column)
            if isinstance(v, int | float) and (v > q.threshold or (q.inclusive
                                                                   and v == q.threshold)):
                rows.append({"key": key.decode(), "partition": p, "value": row})
    return {"rows": rows}


@runs(AtLeast)
async def at_least(qs: Queries, q: AtLeast, caller: Caller) -> Any:
    g: Gather[Any] = Gather(qs, q, qs.view(q.view), caller)

    async def local(held: list[int], store: Any) -> dict[str, Any]:
        return await asyncio.to_thread(_part, q, store, held)

    def merge(parts: list[dict[str, Any]]) -> AtLeastRows:
        rows = sorted((r for part in parts for r in part["rows"]), key=lambda r: r["key"])
        return AtLeastRows(rows, len(rows))

    return await g.run(local, merge)


declare(Route("GET", "/v1/views/{view}/at-least", "at_least", fanout=True, fields=True))


@pushdown
def at_least_rule(sel: exp.Select, view: Any) -> AtLeast | None:
    where = sel.args.get("where")
    cond = where.this if where is not None else None
    if not isinstance(cond, exp.GTE | exp.GT) or not asks_only(sel, "where"):
        return None
    col, value = cond.this, cond.expression
    types = {c.name: c.type.split("(")[0].lower() for c in view.columns}
    if not isinstance(col, exp.Column) or types.get(col.name) not in NUMERIC \\
            or not isinstance(value, exp.Literal) or value.is_string:
        return None
    return AtLeast(view.name, col.name, float(value.this), isinstance(cond, exp.GTE))
'''


def _expected(threshold: float, inclusive: bool) -> list[str]:
    return sorted(r["account"] for r in BAL
                  if r["balance"] > threshold or (inclusive and r["balance"] == threshold))


def test_a_query_type_from_a_views_module_over_http_sql_and_peers(
        cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "siq_at_least.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}:{':'.join(sys.path)}")
    nodes = start_sql_nodes(cluster, n=2, extra=["--views-module", "siq_at_least"])
    (port, sql, _), (other, _, _) = nodes
    url = f"http://127.0.0.1:{port}/v1/views/balances/at-least"
    with httpx.Client(timeout=30, headers=cluster.headers) as c:
        # over HTTP: the float and the bool read from the query string; both nodes own
        # partitions, so the entry asks the other for its part (hops 1)
        for threshold, inclusive in ((200.0, True), (200.0, False), (-7.5, True)):
            r = c.get(url, params={"column": "balance", "threshold": threshold,
                                   "inclusive": str(inclusive).lower()})
            assert r.status_code == 200, r.text
            doc = r.json()
            assert doc["status"] == "OK" and doc["missing_partitions"] == [], doc
            assert [row["key"] for row in doc["rows"]] == _expected(threshold, inclusive)
            assert doc["count"] == len(doc["rows"]) and r.headers["x-streamiq-hops"] == "1"
        assert doc["served_by"] == f"127.0.0.1:{port}"
        assert c.get(f"http://127.0.0.1:{other}/v1/views/balances/at-least",
                     params={"column": "balance", "threshold": 399}).json()["rows"]
        # a parameter that is not its type: a 400 naming it, not a 500
        bads: list[tuple[dict[str, str | int], str]] = [
            ({"column": "balance", "threshold": "lots"}, "threshold"),
            ({"column": "balance", "threshold": 1, "inclusive": "maybe"}, "inclusive"),
            ({"threshold": 1}, "column")]
        for bad, name in bads:
            r = c.get(url, params=bad)
            assert r.status_code == 400 and name in r.text, (bad, r.status_code, r.text)
    # as SQL: WHERE balance >= x is the type's pushdown; DuckDB runs the statement over
    # its rows (the select list, ORDER BY)
    before = metric(cluster, port, 'streamiq_sql_statements_total{kind="at_least"}')
    with connect(sql, cluster.token) as conn:
        got = conn.execute("SELECT account FROM balances WHERE balance >= 200").fetchall()
        assert sorted(a for (a,) in got) == _expected(200, True)
        got = conn.execute("SELECT account FROM balances WHERE balance > 200").fetchall()
        assert sorted(a for (a,) in got) == _expected(200, False)
    assert metric(cluster, port, 'streamiq_sql_statements_total{kind="at_least"}') \
        == before + 2
