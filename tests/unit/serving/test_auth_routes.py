"""Client tokens and the cluster credential on a node, through the lean path and the
full app: 401 without a valid token, 403 for a view the token may not read, a forged
forwarded mark refused before it takes a peer slot, the owner checking the client's
token again on the wire."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import make_app
from test_fastpath import call

from streamiq.auth import hop_mark, mint
from streamiq.config import Settings
from streamiq.serving.wire import answer
from streamiq.views.bank import BALANCES

SECRET, CLUSTER = "jwt-secret-for-the-tests-32-bytes-long", "cluster-secret-for-the-tests"
TOKEN = f"Bearer {mint(SECRET, subject='t')}"
MARK = hop_mark(CLUSTER).encode()
A1 = "/v1/views/balances/keys/a1"


@pytest.fixture
def app(tmp_path: Path) -> Any:
    return make_app(tmp_path / "node", Settings(
        auth=True, jwt_secret=SECRET, cluster_secret=CLUSTER, internal_concurrency=4,
        api_keys={"orders-only-key": "views:order_counts"}))


@pytest.mark.parametrize("path", [A1, "/account/a1", "/v1/cluster", "/v1/views",
                                  "/v1/views/balances/scan", "/v1/metadata/balances/a1",
                                  "/v1/dashboard", "/v1/events", "/v1/pipeline"])
async def test_no_token_no_answer(app: Any, path: str) -> None:
    for auth in (None, "Bearer not-a-token", "Basic dXNlcjpwYXNz", TOKEN[:-2]):
        status, body, headers = await call(app, path, forwarded=False, auth=auth)
        assert status == 401 and body["code"] == "UNAUTHENTICATED", (path, auth, body)
        assert headers["www-authenticate"] == "Bearer"


async def test_a_valid_token_is_answered_on_the_lean_path(app: Any) -> None:
    for path in (A1, "/account/a1"):
        status, body, headers = await call(app, path, forwarded=False, auth=TOKEN)
        assert status == 200 and body["value"]["balance"] == 5
        assert headers["x-streamiq-hops"] == "0"


async def test_a_token_reads_only_its_views(app: Any) -> None:
    key = "Bearer orders-only-key"
    status, body, _ = await call(app, A1, forwarded=False, auth=key)
    assert status == 403 and body["code"] == "FORBIDDEN" and body["view"] == "balances"
    status, body, _ = await call(app, "/v1/views/order_counts/keys/s1%7CGENERAL",
                                 forwarded=False, auth=key)
    assert status not in (401, 403), body  # its own view: answered (here: not held)
    scoped = f"Bearer {mint(SECRET, scope='views:order_counts')}"
    assert (await call(app, "/account/a1", forwarded=False, auth=scoped))[0] == 403


async def test_an_expired_or_foreign_token_is_refused(app: Any) -> None:
    expired = f"Bearer {mint(SECRET, ttl_s=-10)}"
    status, body, _ = await call(app, A1, forwarded=False, auth=expired)
    assert status == 401 and "expired" in body["detail"]
    foreign = f"Bearer {mint('another-secret-of-32-bytes-at-least')}"
    assert (await call(app, A1, forwarded=False, auth=foreign))[0] == 401


async def test_a_forged_forwarded_mark_is_refused_before_a_peer_slot(app: Any) -> None:
    slots = app.deps.coordinator.peer_slots
    free = slots._value
    for path, query in ((A1, b""), ("/v1/views/balances/scan", b"partitions=0,1,2")):
        status, body, _ = await call(app, path, forwarded=True, auth=TOKEN, query=query)
        assert status == 401 and "cluster credential" in body["detail"], body
        assert slots._value == free  # no internal slot was taken
    # with the cluster credential, the owner still checks the client's token
    assert (await call(app, A1, forwarded=MARK))[0] == 401
    status, body, _ = await call(app, A1, forwarded=MARK, auth=TOKEN)
    assert status == 200 and body["value"]["balance"] == 5
    status, body, _ = await call(app, "/v1/views/balances/scan", forwarded=MARK, auth=TOKEN,
                                 query=b"partitions=0,1,2")
    assert status == 200, body


def test_the_owner_checks_the_token_of_a_wire_lookup(app: Any) -> None:
    p = BALANCES.partition_of("a1", 3)
    path = A1.encode()
    assert answer(app.wire_lookup, p, 3, path, b"-")[0] == 401
    assert answer(app.wire_lookup, p, 3, path, b"orders-only-key")[0] == 403
    assert answer(app.wire_lookup, p, 3, path, TOKEN[7:].encode())[0] == 200
