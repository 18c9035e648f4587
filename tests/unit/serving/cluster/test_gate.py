"""The authentication gate (no web framework): the cluster credential on a peer's
request, and the client's token checked against the view the request reads (for HTTP,
the view its route reads: an alias's view too)."""

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


def test_a_forwarded_mark_must_be_the_cluster_credential() -> None:
    g = gate()
    with pytest.raises(Unauthenticated):
        g.check(ORDERS_ONLY, "1", "order_counts")
    assert g.check(ORDERS_ONLY, hop_mark(CLUSTER), "order_counts")  # a peer's request
    assert not g.check(ORDERS_ONLY, None, "order_counts")  # a client's
    assert g.is_mark(hop_mark(CLUSTER).encode()) and not g.is_mark(b"1")


def test_the_token_must_allow_the_view_the_route_reads() -> None:
    g = gate()
    g.check(ORDERS_ONLY, None, view_of(LOOKUP.path, {"view": "order_counts"}))
    with pytest.raises(Forbidden):
        g.check(ORDERS_ONLY, None, view_of(LOOKUP.path, {"view": "balances"}))
    with pytest.raises(Forbidden):  # the alias reads balances, whatever its path says
        g.check(ORDERS_ONLY, None, view_of(ACCOUNT.path, {"account": "a1"}))
    g.check(ORDERS_ONLY, None, None)  # no view: a valid token
    with pytest.raises(Unauthenticated):
        g.check(None, None, None)
