"""One route table: the app's routes, the lean path and the metrics labels agree."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute

from streamiq.serving import routes
from streamiq.serving.routes import ACCOUNT, ROUTES, lookup_target, query_of, undeclared

SERVING = Path(routes.__file__).parent


def fastapi_app(app: Any) -> FastAPI:
    inner = app.app  # LeanLookups -> Timed (metrics on) -> FastAPI
    return inner if isinstance(inner, FastAPI) else inner.app


def app_routes(app: FastAPI) -> list[tuple[str, str]]:
    return [(m, r.path) for r in app.routes if isinstance(r, APIRoute)
            for m in r.methods or ()]


def example(route: routes.Route) -> str:
    """A concrete path of ``route`` (every parameter ``x1``)."""
    return re.sub(r"\{[^}]+\}", "x1", route.path)


def test_every_route_of_the_app_is_declared_in_the_table(app: Any) -> None:
    fast = fastapi_app(app)
    assert app_routes(fast) and undeclared(app_routes(fast)) == []

    @fast.get("/v1/views/{view}/sample")  # a new query type, forgotten in the table
    async def sample(view: str) -> dict[str, str]:
        return {"view": view}

    assert undeclared(app_routes(fast)) == [("GET", "/v1/views/{view}/sample")]


def test_every_query_route_has_its_label() -> None:
    for route in ROUTES:
        assert route.query and query_of(route.method, example(route)) == route.query
    assert query_of("GET", "/v1/views/v/windows") == "window_scan"  # was untimed


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: f"{r.method} {r.path}")
async def test_the_app_times_every_query_route(app: Any, route: routes.Route) -> None:
    latency = app.deps.coordinator.traffic.latency
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://n") as c:
        path = example(route).replace("x1", "balances", 1) if "{view}" in route.path \
            else example(route)
        await c.request(route.method, path + "?wait_ms=1", json={"keys": ["a1"]}
                        if route.method == "POST" else None)
    labels = {key[0] for key in latency.counts}
    assert labels == {route.query}, route


def test_lookup_paths_and_the_alias() -> None:
    assert lookup_target(["", "v1", "views", "v", "keys", "k"]) == ("v", "k")
    assert lookup_target(["", "account", "a1"]) == ("balances", "a1")
    assert lookup_target(["", "account", "a b"]) is None  # the alias's key form
    assert lookup_target(["", "v1", "views", "v", "keys"]) is None
    assert lookup_target(["", "v1", "views", "v", "scan", "k"]) is None


def test_the_account_alias_is_declared_once() -> None:
    """``/account`` and the view it reads appear in the route table only."""
    assert (ACCOUNT.view, ACCOUNT.key) == ("balances", "account")
    for py in SERVING.rglob("*.py"):
        if py.name == "routes.py":
            continue
        code = "\n".join(line for line in py.read_text().splitlines()
                         if not line.lstrip().startswith(("#", "``", "A ``", "\"")))
        assert '"balances"' not in code and '"/account' not in code, py
