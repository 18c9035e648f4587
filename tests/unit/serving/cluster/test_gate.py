"""The authentication gate: the cluster credential on forwarded requests, and the
client's token checked against the view the route reads (an alias's view too)."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from streamiq.auth import hop_mark
from streamiq.config import Settings
from streamiq.errors import Forbidden, Unauthenticated
from streamiq.serving.cluster.gate import Gate
from streamiq.serving.routes import ACCOUNT, LOOKUP, Route

CLUSTER = "cluster-secret-for-the-tests"
ORDERS_ONLY = "Bearer orders-only-key"


def gate() -> Gate:
    return Gate(Settings(auth=True, jwt_secret="jwt-secret-for-the-tests-32-bytes-long",
                         cluster_secret=CLUSTER,
                         api_keys={"orders-only-key": "views:order_counts"}))


def request(route: Route | None, params: dict[str, str], headers: dict[str, str]) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/x", "query_string": b"",
                    "route": route, "path_params": params,
                    "headers": [(k.encode(), v.encode()) for k, v in headers.items()]})


def test_a_forwarded_mark_must_be_the_cluster_credential() -> None:
    g = gate()
    with pytest.raises(Unauthenticated):
        g.check(request(LOOKUP, {"view": "order_counts"},
                        {"x-streamiq-forwarded": "1", "authorization": ORDERS_ONLY}))
    ok = request(LOOKUP, {"view": "order_counts"},
                 {"x-streamiq-forwarded": hop_mark(CLUSTER), "authorization": ORDERS_ONLY})
    g.check(ok)
    assert g.is_forwarded(ok) and g.is_mark(hop_mark(CLUSTER).encode())


def test_the_token_must_allow_the_view_the_route_reads() -> None:
    g = gate()
    g.check(request(LOOKUP, {"view": "order_counts"}, {"authorization": ORDERS_ONLY}))
    with pytest.raises(Forbidden):
        g.check(request(LOOKUP, {"view": "balances"}, {"authorization": ORDERS_ONLY}))
    with pytest.raises(Forbidden):  # the alias reads balances, whatever its path says
        g.check(request(ACCOUNT, {"account": "a1"}, {"authorization": ORDERS_ONLY}))
    g.check(request(None, {}, {"authorization": ORDERS_ONLY}))  # no view: a valid token
    with pytest.raises(Unauthenticated):
        g.check(request(None, {}, {}))
