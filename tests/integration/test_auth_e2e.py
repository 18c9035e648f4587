"""Authentication through real processes: three nodes and the ingest with client
authentication on. Without a token nothing answers but /health; a token reads its
views from any node, forwarded over the lookup wire (the owner checks the token again)
and gathered across nodes; a forged forwarded request and a lookup wire without the
cluster credential are refused."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from changelog import produce_rows
from confluent_kafka import Producer

from streamiq.auth import hop_mark, mint
from streamiq.client import Client
from streamiq.kafka.admin import ensure_topics
from streamiq.serving.cluster.wire import PREFACE, REPLY, request_body, request_frame
from streamiq.views.bank import BALANCES
from streamiq.views.catalog import PROGRESS_TOPIC_CONFIG, progress_topic
from streamiq.views.orders import ORDER_COUNTS, ORDER_COUNTS_1M

pytestmark = pytest.mark.integration


def _lookup(rid: int, key: str, view: str, token: str | None) -> bytes:
    """A peer's lookup of ``key`` (a request frame of the peer protocol)."""
    view_of = {"balances": BALANCES, "order_counts": ORDER_COUNTS}[view]
    return request_frame(rid, 10_000, request_body(
        "lookup", {"view": view, "key": key}, [view_of.partition_of(key, 3)], 3, token))


def _wire_without_the_credential(port: int, key: str) -> bytes:
    """What a node answers a peer connection opened with a guessed credential."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(PREFACE + b"1\n" + _lookup(1, key, "balances", None))
        out = b""
        while chunk := s.recv(65536):  # the node closes the connection after its reply
            out += chunk
    return out


def test_tokens_scopes_and_the_cluster_credential(cluster: Any) -> None:
    cluster.auth = True
    accounts = [{"account": f"a{i}", "balance": i, "count": 1, "last_update": 0}
                for i in range(30)]
    ensure_topics({"bootstrap.servers": cluster.bootstrap},
                  {cluster.topic(BALANCES.changelog_topic): 3})
    produce_rows(cluster.bootstrap, cluster.topic(BALANCES.changelog_topic), BALANCES,
                 accounts)
    ports = [p for p, _ in cluster.nodes(3)]
    ingest, _ = cluster.ingest()
    token = cluster.headers
    scoped = {"authorization": f"Bearer {mint(cluster.jwt_secret, scope='views:orders')}"}
    with httpx.Client(timeout=30) as c:
        for port in ports:
            base = f"http://127.0.0.1:{port}"
            assert c.get(f"{base}/health").status_code == 200
            for path in ("/account/a1", "/v1/views/balances/keys/a1", "/v1/cluster"):
                r = c.get(base + path)
                assert r.status_code == 401 and r.json()["code"] == "UNAUTHENTICATED", r.text
            r = c.post(f"{base}/v1/views/balances/keys", json={"keys": ["a1"]})
            assert r.status_code == 401
            hops = set()
            for acc in accounts:  # every key from every node: local or one hop
                r = c.get(f"{base}/v1/views/balances/keys/{acc['account']}", headers=token)
                assert r.status_code == 200 and r.json()["value"] == acc, r.text
                hops.add(r.headers["x-streamiq-hops"])
                r = c.get(f"{base}/v1/views/balances/keys/{acc['account']}", headers=scoped)
                assert r.status_code == 403 and r.json()["code"] == "FORBIDDEN", r.text
            assert hops == {"0", "1"}
            r = c.post(f"{base}/v1/views/balances/keys", headers=token,
                       json={"keys": [a["account"] for a in accounts]})
            assert r.json()["status"] == "OK" and all(x["found"] for x in r.json()["results"])
            r = c.get(f"{base}/v1/views/balances/aggregate", headers=token,
                      params={"agg": "sum(balance)"})
            assert r.json()["groups"] == [{"sum(balance)": sum(range(30))}], r.text
            # a client posing as a peer (the header nodes once sent): a client still
            for mark in ("1", "0" * 64):
                r = c.get(f"{base}/v1/views/balances/scan", headers={
                    "x-streamiq-forwarded": mark}, params={"partitions": "0"})
                assert r.status_code == 401 and r.json()["code"] == "UNAUTHENTICATED"
                r = c.get(f"{base}/v1/views/balances/scan", headers={
                    **token, "x-streamiq-forwarded": mark})
                assert r.status_code == 200 and r.json()["count"] == len(accounts), r.text
                assert "partial" not in r.json()  # the whole answer, not a peer's part
                r = c.get(f"{base}/v1/views/balances/scan", headers={
                    **token, "x-streamiq-forwarded": mark}, params={"partitions": "0"})
                assert r.status_code == 400, r.text  # no route takes a peer's partitions
                assert r.json()["problems"][0].startswith("partitions: not a parameter")
        # lookups forwarded by nodes went over the peer protocol, authenticated
        wire = sum(c.get(f"http://127.0.0.1:{p}/health").json()["peers"]["replies"]
                   for p in ports)
        assert wire > 0
        reply = _wire_without_the_credential(ports[0], "a1")
        assert REPLY.unpack_from(reply)[2] == 401
        assert b"UNAUTHENTICATED" in reply and b"balance" not in reply
        # the ingest: writes need the ingest scope
        url = f"http://127.0.0.1:{ingest}/account/100001"
        assert c.post(url, params={"amount": 5}).status_code == 401
        assert c.post(url, params={"amount": 5}, headers=scoped).status_code == 403
        assert c.post(url, params={"amount": 5}, headers=token).status_code == 200


def _wire(port: int, mark: bytes, frames: list[bytes]) -> list[tuple[int, bytes]]:
    """Requests of the peer protocol with the cluster credential ``mark``: (status, body)
    of each frame's reply, by request id (1, 2...)."""
    got: dict[int, tuple[int, bytes]] = {}
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(PREFACE + mark + b"\n" + b"".join(frames))
        buf = b""
        while len(got) < len(frames):
            if len(buf) >= REPLY.size:
                size, rid, status = REPLY.unpack_from(buf)
                if len(buf) >= REPLY.size + size:
                    got[rid] = (status, buf[REPLY.size:REPLY.size + size])
                    buf = buf[REPLY.size + size:]
                    continue
            chunk = s.recv(65536)
            assert chunk, f"the node closed the connection after {got}"
            buf += chunk
    return [got[i] for i in sorted(got)]


def _until(what: str, check: Callable[[], bool], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.2)


STORES = ["dir/s1", "50%/x", "\ufffd", "plain"]  # stores of keys "<store>|GENERAL"


def test_keys_in_paths_and_metadata_by_scope(cluster: Any) -> None:
    """Through three real nodes with authentication on: a key holding "/" written to the
    changelog reads back through the Python client and from every node (locally, over
    an HTTP hop, over the wire); a path that is not UTF-8 is a 400 on the entry, on a
    forwarded request and on the wire (never the row of U+FFFD); an empty key is a 400;
    a view-scoped token sees its view's metadata only, ``cluster:read`` all of it."""
    cluster.auth = True
    conf = {"bootstrap.servers": cluster.bootstrap}
    progress = cluster.topic(progress_topic(cluster.name))
    ensure_topics(conf, {cluster.topic(v.changelog_topic): 3 for v in (ORDER_COUNTS,
                                                                         ORDER_COUNTS_1M)})
    ensure_topics(conf, {progress: 1}, config=PROGRESS_TOPIC_CONFIG)
    rows = [{"store": s, "type": "GENERAL", "count": i + 1, "revenue": 1.0}
            for i, s in enumerate(STORES)]
    produce_rows(cluster.bootstrap, cluster.topic(ORDER_COUNTS.changelog_topic), ORDER_COUNTS,
                 rows)
    p = Producer(conf)
    for view, progress_doc in ((b"order_counts", b'{"view": "order_counts", "batches": 1}'),
                               (b"order_counts_1m", b'{"view": "order_counts_1m", "batches": 2}'),
                               (b"junk", b"not json")):
        p.produce(progress, key=view, value=progress_doc)
    assert p.flush(15) == 0
    ports = [port for port, _ in cluster.nodes(3, app="orders")]
    cluster.settle(ports, "order_counts")
    token = cluster.headers
    mark = hop_mark(cluster.secret)

    # keys: any string through the Python client, with a token scoped to the view
    scoped_token = mint(cluster.jwt_secret, scope="views:order_counts")
    with Client([f"127.0.0.1:{ports[0]}"], token=scoped_token) as c:
        _until("rows materialized", lambda: all(
            c.get("order_counts", f"{s}|GENERAL") is not None for s in STORES))
        for i, s in enumerate(STORES):
            doc = c.get("order_counts", f"{s}|GENERAL")
            assert doc is not None and doc["key"] == f"{s}|GENERAL", doc
            assert doc["value"]["count"] == i + 1 and c.last is not None and c.last.hops == 0
    key = "dir/s1|GENERAL"
    path = f"/v1/views/order_counts/keys/{quote(key, safe='')}"
    with httpx.Client(timeout=30, headers=token) as h:
        hops = set()
        for port in ports:
            base = f"http://127.0.0.1:{port}"
            r = h.get(base + path)
            assert r.status_code == 200 and r.json()["value"]["count"] == 1, r.text
            hops.add(r.headers["x-streamiq-hops"])
            r = h.get(base + path, params={"wait_ms": 1})  # the full route, not the lean path
            assert r.status_code == 200 and r.json()["key"] == key, r.text
            for bad in ("%FF", "%ED%A0%80"):  # a stray byte, a lone surrogate
                r = h.get(f"{base}/v1/views/order_counts/keys/{bad}%7CGENERAL")
                assert r.status_code == 400 and "not valid UTF-8" in r.json()["detail"], \
                    (bad, r.text)
            r = h.get(f"{base}/v1/views/order_counts/keys/%EF%BF%BD%7CGENERAL")  # U+FFFD
            assert r.status_code == 200 and r.json()["value"]["count"] == 3, r.text
            r = h.get(f"{base}/v1/views/order_counts/keys/")
            assert r.status_code == 400 and "empty" in r.json()["detail"], r.text
        assert hops == {"0", "1"}
        meta = h.get(f"http://127.0.0.1:{ports[0]}/v1/cluster").json()
    part = ORDER_COUNTS.partition_of(key, 3)
    owner = int(meta["views"]["order_counts"][str(part)]["assigned"][0].rsplit(":", 1)[1])
    replies = _wire(owner, mark.encode(), [
        _lookup(1, key, "order_counts", f"Bearer {cluster.token}"),
        _lookup(2, key, "order_counts", None)])  # the owner checks the client's token
    assert replies[0][0] == 200 and json.loads(replies[0][1])["key"] == key, replies
    assert replies[1][0] == 401 and b"UNAUTHENTICATED" in replies[1][1], replies

    # metadata: the view-scoped token sees order_counts only; cluster:read everything
    scoped = {"authorization": f"Bearer {scoped_token}"}
    ops = {"authorization": f"Bearer {mint(cluster.jwt_secret, scope='cluster:read')}"}
    both = {"order_counts", "order_counts_1m"}
    with httpx.Client(timeout=30) as h:
        for port in ports:
            base = f"http://127.0.0.1:{port}"

            def followed(base: str = base) -> bool:
                return set(h.get(f"{base}/v1/pipeline", headers=ops).json()["views"]) == both

            _until("progress followed", followed)
            views = h.get(f"{base}/v1/views", headers=scoped).json()["views"]
            assert [v["name"] for v in views] == ["order_counts"]
            assert {v["name"] for v in h.get(f"{base}/v1/views", headers=ops).json()["views"]} \
                == both
            cl = h.get(f"{base}/v1/cluster", headers=scoped).json()
            assert set(cl["views"]) == {"order_counts"} and "health" not in cl, cl
            assert all(set(n["partitions"]) <= {"order_counts"} for n in cl["nodes"]), cl
            cl = h.get(f"{base}/v1/cluster", headers=ops).json()
            assert set(cl["views"]) == both and "health" in cl and len(cl["nodes"]) == 3
            snap = h.get(f"{base}/v1/dashboard", headers=scoped).json()
            assert set(snap["cluster"]["views"]) == set(snap["pipeline"]) == {"order_counts"}
            assert not {"health", "traffic", "latency"} & set(snap), snap
            snap = h.get(f"{base}/v1/dashboard", headers=ops).json()
            assert set(snap["cluster"]["views"]) == set(snap["pipeline"]) == both
            assert {"health", "traffic", "latency"} <= set(snap)
            pipe = h.get(f"{base}/v1/pipeline", headers=scoped).json()
            assert set(pipe["views"]) == {"order_counts"} and "skipped" not in pipe, pipe
            assert h.get(f"{base}/v1/pipeline", headers=ops).json()["skipped"] >= 1
            assert h.get(f"{base}/v1/views/order_counts_1m/windows", headers=ops
                         ).status_code == 403  # cluster:read reads no row
