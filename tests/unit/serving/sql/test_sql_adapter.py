"""The SQL front end's engine over a node (serving/sql/adapter.py): the node's views as
tables, its token check on the password, and every read through the query layer.

The node is the serving unit tests' app over in-memory stores (tests/nodeapp.py): its
Queries are called as the SQL front end calls them, and a psycopg client reaches them
through a PgServer on the test's own loop. No HTTP.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from nodeapp import make_app
from procs import free_port

from streamiq._sqlstate import sqlstate_of
from streamiq.auth import Principal
from streamiq.config import Settings
from streamiq.errors import StreamiqError, Unauthenticated, Unavailable
from streamiq.serving.cluster.peers import PeerReply
from streamiq.serving.query import codec
from streamiq.serving.query.run import Queries
from streamiq.serving.sql import adapter
from streamiq.serving.sql.adapter import NodeEngine
from streamiq.serving.sql.engine import Bounds, Column, Freshness
from streamiq.serving.sql.listen import start_sql
from streamiq.serving.sql.server import PgServer
from streamiq.state import Checkpoint
from streamiq.views.base import store_key

PEER = "127.0.0.1:2"
CREDENTIAL = "Bearer the-token"


def _put(qs: Queries, view: str, key: str, row: dict[str, Any], window: int | None = None
         ) -> None:
    v = qs.node.views[view]
    p = v.partition_of(key, qs.node.partitions[view])
    stored = key.encode() if window is None else store_key(key, window)
    qs.node.stores[view].apply(p, [(stored, json.dumps(row).encode())], Checkpoint(offset=1))


def engine(root: Path, settings: Settings | None = None) -> NodeEngine:
    """A node holding balances a1 (5), a2 (7), b1 (11) and two windows of store c1."""
    qs: Queries = make_app(root, settings).deps.queries
    for k, bal in (("a2", 7), ("b1", 11)):
        _put(qs, "balances", k, {"account": k, "balance": bal, "count": 1, "last_update": 9})
    for start in (0, 60_000):
        _put(qs, "order_counts_1m", "c1|GENERAL", {
            "store": "c1", "type": "GENERAL", "window_start": start,
            "window_end": start + 60_000, "count": 2, "revenue": 3.5}, start)
    return NodeEngine(qs, qs.coordinator.gate.auth)


def peer_answers(e: NodeEngine, reply: PeerReply) -> list[dict[str, Any]]:
    """Every partition's replica is PEER, which answers ``reply``: the requests sent
    (the peer protocol's: the client's credential is ``authorization``)."""
    qs = e.queries
    qs.node.router.fresh = [PEER]  # type: ignore[attr-defined]
    qs.node.router.active = PEER  # type: ignore[attr-defined]
    sent: list[dict[str, Any]] = []

    async def send(address: str, body: bytes, deadline: float) -> PeerReply:
        doc = json.loads(body)
        sent.append({"authorization": doc["t"], **doc})
        return reply

    qs.coordinator.peers._send = send  # a test's transport
    return sent


async def test_tables_are_the_views_the_principal_may_read_with_their_types(
        tmp_path: Path) -> None:
    e = engine(tmp_path)
    reader = Principal("b", frozenset({"views:balances"}))
    assert [v.name for v in await e.views(reader)] == ["balances"]
    every = {v.name: v for v in await e.views(Principal("all", frozenset({"views:*"})))}
    assert sorted(every) == ["balances", "order_counts", "order_counts_1m"]
    assert every["balances"].key_columns == ("account",)
    assert every["balances"].columns[:3] == (
        Column("account", "string"), Column("balance", "decimal(38,0)"),
        Column("count", "bigint"))
    assert every["order_counts_1m"].columns == (
        Column("store", "string"), Column("type", "string"), Column("window_start", "bigint"),
        Column("window_end", "bigint"), Column("count", "bigint"), Column("revenue", "double"))


async def test_the_password_is_a_token_checked_as_over_http(tmp_path: Path) -> None:
    e = engine(tmp_path, Settings(auth=True, api_keys={"k-1": "views:balances"}))
    who = await e.authenticate("anyone", "k-1")
    assert who.may_read("balances") and not who.may_read("order_counts")
    for bad in ("", "k-2"):
        with pytest.raises(Unauthenticated):
            await e.authenticate("anyone", bad)


async def test_a_lookup_answered_here(tmp_path: Path) -> None:
    e = engine(tmp_path)
    got = await e.lookup("balances", "a1", Freshness())
    assert [r["balance"] for r in got.rows] == [5] and got.hops == 0 and not got.missing
    assert (await e.lookup("balances", "zz", Freshness())).rows == []
    windows = await e.lookup("order_counts_1m", "c1|GENERAL", Freshness())
    assert [r["window_start"] for r in windows.rows] == [0, 60_000]


async def test_a_lookup_elsewhere_is_one_hop_with_the_sessions_credential(
        tmp_path: Path) -> None:
    e = engine(tmp_path)
    row = {"account": "a1", "balance": 6}
    sent = peer_answers(e, PeerReply(200, json.dumps({"value": row}).encode()))
    got = await e.lookup("balances", "a1", Freshness(max_lag=3, authorization=CREDENTIAL))
    assert got.rows == [row] and got.hops == 1
    assert [h["authorization"] for h in sent] == [CREDENTIAL]
    peer_answers(e, PeerReply(404, b'{"code": "NOT_FOUND"}'))
    assert (await e.lookup("balances", "a1", Freshness())).rows == []


async def test_a_replicas_error_is_the_error_it_names(tmp_path: Path) -> None:
    e = engine(tmp_path)
    problem = {"code": "NOT_UP_TO_BOUND", "detail": "has not reflected the position"}
    peer_answers(e, PeerReply(503, json.dumps(problem).encode()))
    with pytest.raises(Unavailable, match="has not reflected") as got:
        await e.lookup("balances", "a1", Freshness())
    assert sqlstate_of(got.value) == "55000"
    with pytest.raises(StreamiqError) as relayed:  # a replica's reply that is not JSON
        codec.read(PeerReply(502, b"<html>"))
    assert relayed.value.http_status == 502  # the error of its status


async def test_multi_get_scan_and_aggregate_go_through_the_query_layer(
        tmp_path: Path) -> None:
    e = engine(tmp_path)
    got = await e.multi_get("balances", ["a1", "b1", "zz"], Freshness())
    assert sorted(r["account"] for r in got.rows) == ["a1", "b1"] and not got.missing
    held_nowhere = await e.multi_get("order_counts", ["c1|GENERAL"], Freshness())
    assert held_nowhere.rows == [] and len(held_nowhere.missing) == 1
    a = await e.scan("balances", Bounds(prefix="a"), Freshness(), 100)
    assert [r["account"] for r in a.rows] == ["a1", "a2"]
    ranged = await e.scan("balances", Bounds(start="a2", end="b2"), Freshness(), 100)
    assert [r["account"] for r in ranged.rows] == ["a2", "b1"]
    windows = await e.scan("order_counts_1m", Bounds(start="c1|G", end="c2"), Freshness(), 9)
    assert [r["window_start"] for r in windows.rows] == [0, 60_000]
    groups = await e.aggregate("balances", [], ["count(*)", "sum(balance)"], "a", Freshness())
    assert list(groups.groups) == [{"count(*)": 2, "sum(balance)": 12}] and not groups.missing


async def test_a_range_ending_where_it_starts_or_before_reads_nothing(tmp_path: Path) -> None:
    """``BETWEEN 'b' AND 'a'`` is no rows (the query layer refuses a scan from past its
    end: 400, 22023 in SQL)."""
    e = engine(tmp_path)
    for start, end in (("b", "a}"), ("a2", "a2")):
        got = await e.scan("balances", Bounds(start=start, end=end), Freshness(), 100)
        assert (list(got.rows), got.missing) == ([], ())


async def test_psycopg_reads_the_node_through_the_adapter(tmp_path: Path) -> None:
    e = engine(tmp_path)
    server = PgServer(e, e.authenticate)
    port = await server.start("127.0.0.1", 0)
    try:
        async with await psycopg.AsyncConnection.connect(
                f"host=127.0.0.1 port={port} user=u password=any dbname=streamiq "
                "sslmode=disable",
                autocommit=True) as conn:
            cur = await conn.execute("SELECT balance FROM balances WHERE account = 'a2'")
            assert await cur.fetchall() == [(7,)]
            cur = await conn.execute("SELECT account FROM balances WHERE account LIKE 'a%' "
                                     "ORDER BY account")
            assert await cur.fetchall() == [("a1",), ("a2",)]
            cur = await conn.execute("SELECT count(*), sum(balance) FROM balances")
            assert await cur.fetchall() == [(3, 23)]
    finally:
        await server.close()


async def test_the_sql_port_is_opened_only_when_set(tmp_path: Path) -> None:
    e = engine(tmp_path)
    assert await start_sql(Settings(auth=False), e.queries) is None  # --sql-port 0: none
    port = free_port()
    server = await start_sql(Settings(auth=False, sql_port=port, sql_max_rows=1),
                             e.queries)
    assert server is not None
    try:
        async with await psycopg.AsyncConnection.connect(
                f"host=127.0.0.1 port={port} password=any sslmode=disable",
                autocommit=True) as conn:
            cur = await conn.execute("SELECT count FROM balances WHERE account = 'a1'")
            assert await cur.fetchall() == [(1,)]
            with pytest.raises(psycopg.errors.ProgramLimitExceeded):  # --sql-max-rows 1
                await conn.execute("SELECT account FROM balances WHERE account LIKE 'a%'")
    finally:
        await server.close()


async def test_reads_ask_at_most_what_a_peer_takes_per_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer's scan page is at most MAX_LIMIT rows and its multi-get MAX_KEYS keys (the
    HTTP API's bounds: asked for more, it answers 400): larger reads go in pages."""
    e = engine(tmp_path)
    monkeypatch.setattr(adapter, "MAX_LIMIT", 2)
    monkeypatch.setattr(adapter, "MAX_KEYS", 2)
    asked: list[Any] = []
    scan, multi_get = e.queries.scan, e.queries.multi_get

    async def spy_scan(query: Any, caller: Any) -> Any:
        asked.append(query)
        return await scan(query, caller)

    async def spy_multi_get(query: Any, caller: Any) -> Any:
        asked.append(query)
        return await multi_get(query, caller)

    monkeypatch.setattr(e.queries, "scan", spy_scan)
    monkeypatch.setattr(e.queries, "multi_get", spy_multi_get)
    got = await e.scan("balances", Bounds(), Freshness(), 100_001)
    assert [r["account"] for r in got.rows] == ["a1", "a2", "b1"]
    assert [a.limit for a in asked] == [2, 2] and asked[1].cursor is not None
    asked.clear()
    assert len((await e.scan("balances", Bounds(), Freshness(), 1)).rows) == 1
    assert [a.limit for a in asked] == [1]
    asked.clear()
    got = await e.multi_get("balances", ["a1", "a2", "b1", "zz"], Freshness())
    assert sorted(r["account"] for r in got.rows) == ["a1", "a2", "b1"]
    assert [a.keys for a in asked] == [("a1", "a2"), ("b1", "zz")]


async def test_in_redirect_mode_a_lookup_asks_the_owner_as_a_gathers_part(
        tmp_path: Path) -> None:
    """A SQL client cannot follow a 307: the owner is asked once, as for a multi-get."""
    e = engine(tmp_path, Settings(auth=False, redirect=True))
    row = {"account": "a1", "balance": 6}
    part = {"partial": {"found": {"a1": row}, "keys": ["a1"]}, "not_active": []}
    sent = peer_answers(e, PeerReply(200, json.dumps(part).encode()))
    got = await e.lookup("balances", "a1", Freshness(authorization=CREDENTIAL))
    assert got.rows == [row] and got.hops == 1
    assert [h["authorization"] for h in sent] == [CREDENTIAL]
    window = {"store": "c1", "type": "GENERAL", "window_start": 0, "count": 2}
    scanned = [{"key": k, "partition": 0, "value": {**window, "store": k[:2]}}
               for k in ("c1|GENERAL", "c1|GENERALX")]  # the prefix's other key: not it
    peer_answers(e, PeerReply(200, json.dumps(
        {"partial": {"rows": scanned, "more": False}, "not_active": []}).encode()))
    windows = await e.lookup("order_counts_1m", "c1|GENERAL", Freshness())
    assert windows.rows == [window] and windows.hops == 1
