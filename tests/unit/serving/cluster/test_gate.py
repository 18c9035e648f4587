"""The authentication gate (no web framework): the cluster credential a peer shows, and
the client's token checked against the view the request reads (for HTTP, the view its
route reads: an alias's view too)."""

from __future__ import annotations

import pytest

from streamiq.auth import hop_mark
from streamiq.config import Settings
from streamiq.errors import Forbidden, Unauthenticated
from streamiq.serving.cluster.gate import Gate
from streamiq.serving.routes import ACCOUNT, LOOKUP, view_of

CLUSTER = "cluster-secret-for-the-tests"
ORDERS_ONLY = "Bearer orders-only-key"


def gate() -> Gate:
    return Gate(Settings(auth=True, jwt_secret="jwt-secret-for-the-tests-32-bytes-long",
                         cluster_secret=CLUSTER,
                         api_keys={"orders-only-key": "views:order_counts"}))


def test_the_mark_is_the_cluster_credential() -> None:
    g = gate()
    assert g.is_mark(hop_mark(CLUSTER).encode())
    assert not g.is_mark(b"1") and not g.is_mark(hop_mark("another").encode())


def test_the_token_must_allow_the_view_the_route_reads() -> None:
    g = gate()
    g.check(ORDERS_ONLY, view_of(LOOKUP.path, {"view": "order_counts"}))
    with pytest.raises(Forbidden):
        g.check(ORDERS_ONLY, view_of(LOOKUP.path, {"view": "balances"}))
    with pytest.raises(Forbidden):  # the alias reads balances, whatever its path says
        g.check(ORDERS_ONLY, view_of(ACCOUNT.path, {"account": "a1"}))
    g.check(ORDERS_ONLY, None)  # no view: a valid token
    with pytest.raises(Unauthenticated):
        g.check(None, None)
