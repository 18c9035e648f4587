"""Input that once made a node answer 500: now a 400 naming the problem."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from nodeapp import call, peer_lookup

from streamiq.state.base import Checkpoint
from streamiq.views.bank import BALANCES
from streamiq.views.base import MAX_KEY_BYTES


async def _ask(app: Any, method: str, url: str, **kw: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app.app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://node") as c:
        return await c.request(method, url, **kw)


@pytest.mark.parametrize("url", [
    "/v1/views/order_counts_1m/windows?to=9223372036854775808",
    "/v1/views/order_counts_1m/keys/s%7Ct/windows?to=9223372036854775808",
    "/v1/views/order_counts_1m/keys/s%7Ct/windows?from=99999999999999999999",
])
async def test_a_window_bound_past_64_bits_is_a_bad_request(app: Any, url: str) -> None:
    r = await _ask(app, "GET", url)
    assert r.status_code == 400 and r.json()["code"] == "BAD_REQUEST", r.text
    assert r.json()["detail"].split(":")[0] in ("to", "from")


@pytest.mark.parametrize(("url", "unknown"), [
    ("/v1/views/balances/aggregate?op=sum&field=balance", ["field", "op"]),
    ("/account/a1?bogus=1", ["bogus"]),
    ("/v1/views/balances/keys/a1?maxlag=3", ["maxlag"]),
    ("/v1/views/balances/scan?partitions=0&limit=5", ["partitions"]),
    ("/v1/views/order_counts_1m/keys/s%7Ct/windows?start=0", ["start"]),  # it is from=
    ("/v1/views/balances/top?column=balance&k=3&sort=asc", ["sort"]),
])
async def test_a_parameter_the_route_does_not_take_is_a_bad_request(
        app: Any, url: str, unknown: list[str]) -> None:
    """Not ignored: ``op=sum&field=balance`` on an aggregate (which takes ``agg``) was
    answered with ``count(*)``, as if nothing were wrong."""
    r = await _ask(app, "GET", url)
    assert r.status_code == 400 and r.json()["code"] == "BAD_REQUEST", r.text
    problems = r.json()["problems"]
    assert [p.split(":")[0] for p in problems] == unknown, problems
    assert all("not a parameter of this route (it takes: " in p for p in problems)


@pytest.mark.parametrize("url", [
    "/v1/views/balances/aggregate?agg=sum(balance)&group_by=account&consistent=false",
    "/account/a1?max_lag=3&wait_ms=10",
    "/v1/views/order_counts_1m/keys/s%7Ct/windows?from=0&to=5",
    "/v1/views/balances/scan?limit=5&prefix=a",
])
async def test_the_parameters_a_route_takes_are_taken(app: Any, url: str) -> None:
    r = await _ask(app, "GET", url)
    assert r.status_code in (200, 404), r.text  # 404: the key is not there


async def test_a_lone_surrogate_key_in_a_multi_get_is_a_bad_request(app: Any) -> None:
    r = await _ask(app, "POST", "/v1/views/balances/keys", content='{"keys": ["a1", "\\ud800"]}',
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["field"] == "keys[1]", r.text
    assert "Unicode" in r.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/views/balances/keys/{k}", "/v1/metadata/balances/{k}"])
async def test_a_key_longer_than_the_limit_is_a_bad_request(app: Any, path: str) -> None:
    ok = await _ask(app, "GET", path.format(k="a" * MAX_KEY_BYTES))
    assert ok.status_code in (200, 404), ok.text  # at the limit: a key like any other
    r = await _ask(app, "GET", path.format(k="a" * (MAX_KEY_BYTES + 1)))
    assert r.status_code == 400 and f"more than {MAX_KEY_BYTES}" in r.json()["detail"], r.text


# -- keys in the path: not UTF-8, empty, holding "/" --

NOT_UTF8 = ["%FF", "a%C3", "%ED%A0%80"]  # a stray byte, a cut sequence, a lone surrogate


def _row(app: Any, key: str, balance: int) -> None:
    """A balances row for ``key`` in the node's store."""
    p = BALANCES.partition_of(key, 3)
    row = {"account": key, "balance": balance, "count": 1, "last_update": 9}
    app.deps.node.stores["balances"].apply(p, [(key.encode(), json.dumps(row).encode())],
                                           Checkpoint(offset=2))


@pytest.mark.parametrize("bad", NOT_UTF8)
async def test_a_key_not_utf8_is_a_bad_request_on_the_lean_path(app: Any, bad: str) -> None:
    """Once looked up as U+FFFD (``%FF`` and ``%FE`` the same key): now a 400 naming the
    segment."""
    _row(app, "\ufffd", 1)  # what the decoded path would have found
    for path in (f"/v1/views/balances/keys/{bad}", f"/account/{bad}",
                 f"/v1/metadata/balances/{bad}", f"/v1/views/order_counts_1m/keys/{bad}/windows"):
        status, body, _ = await call(app, unquote(path), raw_path=path.encode())
        assert status == 400 and body["code"] == "BAD_REQUEST", (path, body)
        assert "not valid UTF-8" in body["detail"] and body["segment"] == bad, body


def test_a_malformed_peer_request_is_a_bad_request() -> None:
    """A peer's request that is not a typed query: 400, never a 500."""
    from nodeapp import make_app, peer_request

    app = make_app(Path(tempfile.mkdtemp()))
    assert peer_request(app, "nope", {"view": "balances"}, [0])[0] == 400
    status, body = peer_request(app, "scan", {"view": "balances", "x": 1}, [0])
    assert status == 400 and "malformed scan query" in body["detail"], body
    assert peer_request(app, "lookup", {"view": "balances", "key": 7}, [0])[0] == 400
    assert peer_request(app, "lookup", {"view": "balances"}, [0])[0] == 400  # no key


async def test_a_key_not_utf8_through_the_node_protocol(app: Any, serve_node: Any) -> None:
    """Over a real socket, through the protocol's lean path and the server's decoding."""
    _row(app, "\ufffd", 1)
    port = await serve_node(app)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as c:
        for bad in NOT_UTF8:
            r = await c.get(f"/v1/views/balances/keys/{bad}")
            assert r.status_code == 400 and "not valid UTF-8" in r.json()["detail"], r.text
        assert (await c.get("/v1/views/balances/keys/%EF%BF%BD")).status_code == 200  # U+FFFD


@pytest.mark.parametrize("path", ["/v1/views/balances/keys/", "/v1/metadata/balances/",
                                  "/v1/views/order_counts_1m/keys//windows", "/account/"])
async def test_an_empty_key_is_a_bad_request_naming_it(app: Any, path: str) -> None:
    status, body, _ = await call(app, path)
    assert status == 400 and body["code"] == "BAD_REQUEST", (path, body)
    assert "empty" in body["detail"] or body["detail"].startswith("account:"), body


async def test_a_key_holding_a_slash_is_looked_up_as_it_is(app: Any) -> None:
    """``%2F`` inside a key is the key's own "/": answered on the lean path, the full
    route and the wire (it was a 404 for an unknown path)."""
    _row(app, "dir/a1", 7)
    _row(app, "dir", 1)  # what a path cut at the "/" might have found instead
    raw = b"/v1/views/balances/keys/dir%2Fa1"
    for query in (b"", b"wait_ms=1"):  # the lean path, then the full route
        status, body, headers = await call(app, "/v1/views/balances/keys/dir/a1",
                                           raw_path=raw, query=query)
        assert status == 200 and body["key"] == "dir/a1" and body["value"]["balance"] == 7
        assert headers["x-streamiq-hops"] == "0"
    status, body = peer_lookup(app, "dir/a1")  # a peer's: the key as it is, no path
    assert status == 200 and body["value"]["balance"] == 7
    status, body, _ = await call(app, "/v1/metadata/balances/dir/a1",
                                 raw_path=b"/v1/metadata/balances/dir%2Fa1")
    assert status == 200 and body["key"] == "dir/a1"
    assert body["partition"] == BALANCES.partition_of("dir/a1", 3)
    # a "%" of the key's own ("%25") stays a "%" beside a "/"
    _row(app, "50%/x", 3)
    status, body, _ = await call(app, "/v1/views/balances/keys/50%/x",
                                 raw_path=b"/v1/views/balances/keys/50%25%2Fx", query=b"wait_ms=1")
    assert status == 200 and body["key"] == "50%/x", body


async def test_a_forwarded_request_asks_for_the_key_the_client_named(app: Any) -> None:
    """The full route forwards a lookup of the key ``dir/a1`` (``%2F`` in the path): the
    owner is asked for that key, whatever its path would have looked like."""
    from streamiq.serving.cluster.peers import PeerReply

    sent: list[str] = []

    async def send(address: str, body: bytes, deadline: float) -> PeerReply:
        sent.append(json.loads(body)["q"]["key"])
        return PeerReply(200, b'{"key": "dir/a1"}')

    co = app.deps.coordinator
    co.peers._send = send
    app.deps.node.router.route_elsewhere("127.0.0.1:2")
    app.deps.node.router.fresh = ["127.0.0.1:2"]
    co.placement.forget_roles()
    status, body, _ = await call(app, "/v1/views/balances/keys/dir/a1",
                                 raw_path=b"/v1/views/balances/keys/dir%2Fa1", query=b"wait_ms=1")
    assert status == 200 and sent == ["dir/a1"], (status, body, sent)
