"""A route made from a query type's fields (``serving/http/declared.py``): each field a
query parameter read as its type (``float``, ``bool``, ``int``, optional, a tuple as a
repeated parameter), its default the parameter's; a value that is not its type a 400
naming it; the answer the result's fields in the scatter-gather envelope."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, FastAPI

from streamiq._fastapi import install_error_handlers
from streamiq.serving.http.answers import Answers
from streamiq.serving.http.declared import _declare
from streamiq.serving.query.model import Caller, Gathered, Query
from streamiq.serving.routes import Route


@dataclass(frozen=True)
class Probe(Query):
    """Echoes what it was asked (a test's query type)."""

    kind = "declared_probe"
    column: str
    ratio: float = 0.5
    exact: bool = False
    k: int = field(default=3, metadata={"doc": "How many."})
    tags: tuple[str, ...] = ()
    prefix: str | None = None


@dataclass(frozen=True)
class Echo:
    asked: dict[str, Any]
    count: int


@pytest.fixture
def client() -> httpx.AsyncClient:
    async def run(q: Probe, caller: Caller) -> Gathered[Echo]:
        asked = {k: getattr(q, k) for k in ("view", "column", "ratio", "exact", "k", "tags",
                                             "prefix")}
        assert isinstance(q.tags, tuple) and q.fresh.max_lag == (7 if q.k == 9 else None)
        return Gathered(q.view, Echo(asked, 1), 3, [], 0, "me:1")

    deps: Any = SimpleNamespace(queries=SimpleNamespace(run=run),
                                caller=lambda request: Caller(), gathered=Answers.gathered)
    router = APIRouter()
    _declare(router, deps, Route("GET", "/v1/views/{view}/probe", Probe.kind, fanout=True,
                                 fields=True), Probe)
    app = FastAPI()
    install_error_handlers(app)
    app.include_router(router)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://node")


async def test_each_field_is_a_parameter_of_its_type(client: httpx.AsyncClient) -> None:
    async with client as c:
        r = await c.get("/v1/views/v/probe", params={"column": "c"})
        assert r.status_code == 200, r.text
        assert r.json() == {"status": "OK", "view": "v", "asked": {
            "view": "v", "column": "c", "ratio": 0.5, "exact": False, "k": 3, "tags": [],
            "prefix": None}, "count": 1, "partitions": 3, "missing_partitions": [],
            "served_by": "me:1"}
        r = await c.get("/v1/views/v/probe", params=[
            ("column", "c"), ("ratio", "2.25"), ("exact", "true"), ("k", "9"), ("tags", "a"),
            ("tags", "b"), ("prefix", "x"), ("max_lag", "7")])
        assert r.status_code == 200, r.text
        assert r.json()["asked"] == {"view": "v", "column": "c", "ratio": 2.25, "exact": True,
                                     "k": 9, "tags": ["a", "b"], "prefix": "x"}


async def test_a_value_not_of_its_type_is_a_400_naming_it(client: httpx.AsyncClient) -> None:
    async with client as c:
        for params, name in (({"column": "c", "ratio": "half"}, "ratio"),
                             ({"column": "c", "exact": "perhaps"}, "exact"),
                             ({"column": "c", "k": "1.5"}, "k"), ({}, "column")):
            r = await c.get("/v1/views/v/probe", params=params)
            assert r.status_code == 400, (params, r.text)
            assert r.json()["code"] == "BAD_REQUEST" and name in r.json()["detail"], r.text


async def test_the_type_s_docs_are_the_route_s(client: httpx.AsyncClient) -> None:
    async with client as c:
        doc = (await c.get("/openapi.json")).json()
    op = doc["paths"]["/v1/views/{view}/probe"]["get"]
    assert op["summary"] == "Echoes what it was asked (a test's query type)."
    params = {p["name"]: p for p in op["parameters"]}
    assert params["k"]["description"] == "How many." and params["column"]["required"]
    assert {"ratio", "exact", "tags", "prefix", "max_lag", "position"} <= set(params)
