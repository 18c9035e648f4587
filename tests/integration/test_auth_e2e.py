"""Authentication through real processes: three nodes and the ingest with client
authentication on. Without a token nothing answers but /health; a token reads its
views from any node, forwarded over the lookup wire (the owner checks the token again)
and gathered across nodes; a forged forwarded request and a lookup wire without the
cluster credential are refused."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import pytest
from changelog import produce_rows

from streamiq.auth import mint
from streamiq.kafka.admin import ensure_topics
from streamiq.serving.wire import PREFACE, request_frame
from streamiq.views.bank import BALANCES

pytestmark = pytest.mark.integration


def _wire_without_the_credential(port: int, path: bytes) -> bytes:
    """What a node answers a lookup wire opened with a guessed credential."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(PREFACE + b"1\n" + request_frame(0, 3, path, b"-"))
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
            # a client posing as a peer: the mark without the cluster credential
            for mark in ("1", "0" * 64):
                r = c.get(f"{base}/v1/views/balances/scan", headers={
                    **token, "x-streamiq-forwarded": mark}, params={"partitions": "0,1,2"})
                assert r.status_code == 401 and "cluster credential" in r.json()["detail"]
                r = c.get(f"{base}/account/a1", headers={**token, "x-streamiq-forwarded": mark})
                assert r.status_code == 401
        # lookups forwarded by nodes went over the lookup wire, authenticated
        wire = sum(c.get(f"http://127.0.0.1:{p}/health").json()["hops"]["wire"] for p in ports)
        assert wire > 0
        reply = _wire_without_the_credential(ports[0], b"/v1/views/balances/keys/a1")
        assert reply.startswith(b"401 ") and b"UNAUTHENTICATED" in reply and b"balance" not in reply
        # the ingest: writes need the ingest scope
        url = f"http://127.0.0.1:{ingest}/account/100001"
        assert c.post(url, params={"amount": 5}).status_code == 401
        assert c.post(url, params={"amount": 5}, headers=scoped).status_code == 403
        assert c.post(url, params={"amount": 5}, headers=token).status_code == 200
