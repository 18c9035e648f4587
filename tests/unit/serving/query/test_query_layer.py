"""The query layer called with no HTTP at all: typed queries in, typed answers out.

The node is the serving unit tests' app over in-memory stores (``../conftest.py``);
the tests call its ``Queries`` directly (no Request, no response), as a SQL front end
would, and see what peers are asked: the typed query, on the peer protocol.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from nodeapp import ME, make_app

from streamiq.errors import BadRequest, NotUpToBound
from streamiq.serving.cluster.coordinator import Relayed
from streamiq.serving.cluster.peers import PeerReply
from streamiq.serving.query.model import (
    Aggregate,
    Caller,
    Freshness,
    Gathered,
    KeyWindows,
    Lookup,
    MultiGet,
    PeerPart,
    Read,
    Scan,
    Windows,
    WindowScan,
)
from streamiq.serving.query.run import Queries

PEER = "127.0.0.1:2"
Sent = tuple[str, dict[str, Any], float]  # address, the request's JSON, its deadline


def queries(root: Path) -> Queries:
    deps: Queries = make_app(root).deps.queries
    return deps


def peer_answers(qs: Queries, reply: PeerReply) -> list[Sent]:
    """Every partition's replica is PEER, which answers ``reply``; what it was asked."""
    qs.node.router.fresh = [PEER]  # type: ignore[attr-defined]
    qs.node.router.active = PEER  # type: ignore[attr-defined]
    sent: list[Sent] = []

    async def send(address: str, body: bytes, deadline: float) -> PeerReply:
        sent.append((address, orjson.loads(body), deadline))
        return reply

    qs.coordinator.peers._send = send  # a test's transport
    return sent


def partition_of(qs: Queries, view: str, key: str) -> int:
    return qs.node.views[view].partition_of(key, qs.node.partitions[view])


async def test_a_lookup_answered_here_is_typed(tmp_path: Path) -> None:
    qs = queries(tmp_path)
    got = await qs.lookup(Lookup("balances", "a1"))
    assert isinstance(got, Read) and got.status == 200
    assert got.row == {"account": "a1", "balance": 5, "count": 1, "last_update": 9}
    missing = await qs.lookup(Lookup("balances", "a2"))
    assert isinstance(missing, Read) and missing.status == 404 and missing.row is None


async def test_a_lookup_elsewhere_asks_the_owner_the_typed_query_with_a_deadline(
        tmp_path: Path) -> None:
    qs = queries(tmp_path)
    sent = peer_answers(qs, PeerReply(200, b'{"value": 1}'))
    loop = asyncio.get_running_loop()
    got = await qs.lookup(Lookup("balances", "a1", fresh=Freshness(max_lag=3)),
                          Caller(authorization="Bearer t", deadline=loop.time() + 2.5))
    assert isinstance(got, Relayed) and got.address == PEER and got.reply.body == b'{"value": 1}'
    address, doc, deadline = sent[0]
    p = partition_of(qs, "balances", "a1")
    assert address == PEER and doc == {
        "k": "lookup", "q": {"view": "balances", "key": "a1",
                             "fresh": {"max_lag": 3, "position": None, "wait_ms": None,
                                       "max_staleness_ms": None, "consistent": False,
                                       "cut": None}},
        "p": [p], "n": 3, "t": "Bearer t"}
    assert loop.time() < deadline <= loop.time() + 2.5  # the caller's budget travels


async def test_a_replicas_windows_are_typed_and_its_error_raised(tmp_path: Path) -> None:
    qs = queries(tmp_path)
    doc = {"key": "c1|x", "partition": 1, "windows": [{"n": 1}], "served_by": PEER,
           "role": "active", "lag": 0}
    peer_answers(qs, PeerReply(200, orjson.dumps(doc)))
    got = await qs.key_windows(KeyWindows("order_counts_1m", "c1|x"))
    assert isinstance(got, Windows) and got.windows == [{"n": 1}] and got.hops == 1
    assert got.stamp == {"served_by": PEER, "role": "active", "lag": 0}
    peer_answers(qs, PeerReply(503, NotUpToBound("not yet", partition=1).render()))
    with pytest.raises(NotUpToBound, match="not yet"):
        await qs.key_windows(KeyWindows("order_counts_1m", "c1|x"))


async def test_multi_get_gives_typed_rows_and_the_unanswered_partitions(
        tmp_path: Path) -> None:
    qs = queries(tmp_path)
    got = await qs.multi_get(MultiGet("balances", ("a1", "a2", "a1")))
    assert isinstance(got, Gathered) and got.status == "OK" and got.missing == []
    assert [(r.key, r.found) for r in got.result.results] == [("a1", True), ("a2", False)]
    assert got.result.results[0].value["balance"] == 5 and got.hops == 0
    # order_counts is held nowhere (conftest: holds is False): PARTIAL, never a wrong row
    part = await qs.multi_get(MultiGet("order_counts", ("c1|x",)))
    assert isinstance(part, Gathered) and part.status == "PARTIAL"
    assert part.result.results == [] and part.result.missing_keys == ["c1|x"]
    assert part.missing == [partition_of(qs, "order_counts", "c1|x")]


async def test_a_read_with_a_position_that_no_replica_reflects_says_what_each_reports(
        tmp_path: Path) -> None:
    """NOT_UP_TO_BOUND names each missing partition's members and their lag (lag 0
    everywhere: the replicas are not behind their changelog, the pipeline is)."""
    qs = queries(tmp_path)
    p = partition_of(qs, "order_counts", "c1|x")
    deadline = asyncio.get_running_loop().time() + 0.5
    with pytest.raises(NotUpToBound) as err:
        await qs.multi_get(MultiGet("order_counts", ("c1|x",), fresh=Freshness(
            position="orders:0:5", wait_ms=100)), Caller(deadline=deadline))
    assert err.value.extra["missing_partitions"] == [p]
    assert f"for partitions [{p}] (partition {p}: {ME} lag 0)" in err.value.message


async def test_scan_and_aggregate_are_typed(tmp_path: Path) -> None:
    qs = queries(tmp_path)
    scan = await qs.scan(Scan("balances", prefix="a"))
    assert isinstance(scan, Gathered) and scan.partitions == 3
    assert [r["key"] for r in scan.result.rows] == ["a1"] and scan.result.next_cursor is None
    agg = await qs.aggregate(Aggregate("balances", aggs=("sum(balance)", "count(*)")))
    assert isinstance(agg, Gathered) and agg.result.aggregates == ["sum(balance)", "count(*)"]
    assert agg.result.groups == [{"sum(balance)": 5, "count(*)": 1}] and agg.result.rows == 1


async def test_a_peers_part_is_answered_here_for_its_partitions(tmp_path: Path) -> None:
    qs = queries(tmp_path)
    p = partition_of(qs, "balances", "a1")
    got = await qs.scan(Scan("balances"), Caller(forwarded=True, partitions=[p]))
    assert isinstance(got, PeerPart) and got.not_active == [] and got.served_by == ME
    assert got.partial is not None and [r["key"] for r in got.partial["rows"]] == ["a1"]
    with pytest.raises(BadRequest, match="partitions: out of range"):
        await qs.scan(Scan("balances"), Caller(forwarded=True, partitions=[7]))
    bad_parts: list[list[Any]] = [["0"], [None], [True], [0.0]]  # in a peer's JSON
    for bad in bad_parts:
        with pytest.raises(BadRequest, match="partitions: expected integers"):
            await qs.scan(Scan("balances"), Caller(forwarded=True, partitions=bad))


async def test_a_gather_asks_each_owner_from_the_typed_query(tmp_path: Path) -> None:
    qs = queries(tmp_path)
    part = {"partial": {"rows": [], "more": False}, "not_active": []}
    sent = peer_answers(qs, PeerReply(200, json.dumps(part).encode()))
    got = await qs.scan(WindowScan("order_counts_1m", start=5, end=9, prefix="c1", limit=2,
                                   fresh=Freshness(max_lag=4)), Caller(authorization="Bearer t"))
    assert isinstance(got, Gathered) and got.status == "OK" and got.hops == 1
    address, doc, _ = sent[0]
    assert address == PEER and doc == {
        "k": "window_scan", "p": [0, 1, 2], "n": 3, "t": "Bearer t",
        "q": {"view": "order_counts_1m", "start": 5, "end": 9, "prefix": "c1", "limit": 2,
              "cursor": None, "fresh": {"max_lag": 4, "position": None, "wait_ms": None,
                                          "max_staleness_ms": None, "consistent": False,
                                          "cut": None}}}


async def test_a_multi_get_sends_each_owner_its_keys(tmp_path: Path) -> None:
    qs = queries(tmp_path)
    sent = peer_answers(qs, PeerReply(200, json.dumps(
        {"partial": {"found": {}, "keys": ["a1"]}, "not_active": []}).encode()))
    got = await qs.multi_get(MultiGet("balances", ("a1",)))
    assert isinstance(got, Gathered) and [r.found for r in got.result.results] == [False]
    p = partition_of(qs, "balances", "a1")
    assert [(doc["k"], doc["p"], doc["q"]["keys"]) for _, doc, _ in sent] == [
        ("multiget", [p], ["a1"])]


async def test_bad_queries_are_400s_naming_the_problem(tmp_path: Path) -> None:
    qs = queries(tmp_path)
    with pytest.raises(BadRequest, match="is windowed"):
        await qs.lookup(Lookup("order_counts_1m", "c1"))
    with pytest.raises(BadRequest, match="nope"):
        await qs.aggregate(Aggregate("balances", group_by=("nope",)))
    with pytest.raises(BadRequest, match="is after"):
        await qs.scan(Scan("balances", start="b", to="a"))


def _rows(qs: Queries, balances: dict[str, int | None]) -> None:
    """Rows of ``balances`` (None: a row without a balance) in the in-memory stores."""
    from streamiq.state.base import Checkpoint

    store, n = qs.node.stores["balances"], qs.node.partitions["balances"]
    for key, balance in balances.items():
        row = {"account": key, "count": 1, **({} if balance is None else {"balance": balance})}
        store.apply(qs.node.views["balances"].partition_of(key, n),
                    [(key.encode(), json.dumps(row).encode())], Checkpoint(offset=1))


async def test_top_k_merges_each_owners_top_k(tmp_path: Path) -> None:
    """The k largest (or smallest) of a column across partitions, ties by key, rows
    without the column left out; a peer's part is its own partitions' top k."""
    from streamiq.serving.query.topk import TopK

    qs = queries(tmp_path)
    balances = {f"k{i:02d}": (i * 37) % 50 for i in range(40)} | {"none": None, "a1": 5}
    _rows(qs, balances)
    want = sorted(((b, k) for k, b in balances.items() if b is not None),
                  key=lambda t: (-t[0], t[1]))
    got = await qs.run(TopK("balances", "balance", 7))
    assert isinstance(got, Gathered) and got.status == "OK" and got.partitions == 3
    assert [(r["value"]["balance"], r["key"]) for r in got.result.rows] == want[:7]
    low = await qs.run(TopK("balances", "balance", 3, "asc", prefix="k"))
    assert isinstance(low, Gathered)
    assert [r["key"] for r in low.result.rows] == [
        k for _, k in sorted((b, k) for k, b in balances.items()
                             if b is not None and k.startswith("k"))][:3]
    p = partition_of(qs, "balances", "k01")
    part = await qs.run(TopK("balances", "balance", 2), Caller(forwarded=True, partitions=[p]))
    assert isinstance(part, PeerPart) and part.partial is not None
    mine = sorted(((b, k) for k, b in balances.items() if b is not None
                   and partition_of(qs, "balances", k) == p), key=lambda t: (-t[0], t[1]))
    assert [r["key"] for r in part.partial["rows"]] == [k for _, k in mine[:2]]
    with pytest.raises(BadRequest, match="no column 'nope'"):
        await qs.run(TopK("balances", "nope"))
    with pytest.raises(BadRequest, match="k: expected"):
        await qs.run(TopK("balances", "balance", 0))


async def test_top_k_places_rows_without_the_column_as_asked(tmp_path: Path) -> None:
    """SQL's pushdown asks for PostgreSQL's order: nulls first (DESC's default) or last
    (ASC's), so a LIMIT past the rows with a value still returns the others; "omit" (the
    HTTP route's) leaves them out."""
    from streamiq.serving.query.topk import TopK

    qs = queries(tmp_path)
    _rows(qs, {"za": 3, "zb": 1, "zc": 2, "zn1": None, "zn2": None})

    async def keys(order: str, nulls: str, k: int = 4) -> list[str]:
        got = await qs.run(TopK("balances", "balance", k, order, prefix="z", nulls=nulls))
        assert isinstance(got, Gathered)
        return [r["key"][1:] for r in got.result.rows]

    assert await keys("desc", "first") == ["n1", "n2", "a", "c"]
    assert await keys("desc", "last") == ["a", "c", "b", "n1"]
    assert await keys("asc", "last", 5) == ["b", "c", "a", "n1", "n2"]
    assert await keys("asc", "first", 2) == ["n1", "n2"]
    assert await keys("asc", "omit", 5) == ["b", "c", "a"]
    with pytest.raises(BadRequest, match="nulls: expected"):
        await qs.run(TopK("balances", "balance", nulls="middle"))


async def test_top_k_travels_to_peers_as_its_typed_query(tmp_path: Path) -> None:
    from streamiq.serving.query.codec import decode
    from streamiq.serving.query.topk import TopK

    qs = queries(tmp_path)
    part = {"partial": {"rows": [{"key": "x", "partition": 0, "value": {"balance": 9}}]},
            "not_active": []}
    sent = peer_answers(qs, PeerReply(200, json.dumps(part).encode()))
    got = await qs.run(TopK("balances", "balance", 2, prefix="x"))
    assert isinstance(got, Gathered) and [r["key"] for r in got.result.rows] == ["x"]
    _, doc, _ = sent[0]
    assert doc["k"] == "topk" and decode(doc["k"], doc["q"]) == TopK("balances", "balance", 2,
                                                                      prefix="x")
