"""Typed queries on the peer protocol: what an entry sends is read back as the same query,
each field checked against its type as JSON reads it (any type pydantic reads: a
``bool`` and a ``float`` field too), and what does not fit is a 400 naming the field."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from streamiq.errors import BadRequest
from streamiq.serving.cluster.wire import request_body
from streamiq.serving.query import codec
from streamiq.serving.query.kinds import KINDS
from streamiq.serving.query.model import (
    Aggregate,
    Freshness,
    KeyWindows,
    Lookup,
    MultiGet,
    Query,
    Scan,
    WindowScan,
)
from streamiq.serving.query.topk import TopK

FRESH = Freshness(max_lag=3, position="in:0:5", wait_ms=100, consistent=True, cut="in:0:4")


def sent(q: Query) -> tuple[str, Any]:
    """(kind, fields) as a peer reads them from the request an entry sends for ``q``."""
    doc = orjson.loads(request_body(q.kind, q, [0], 3, None))
    return doc["k"], doc["q"]


@pytest.mark.parametrize("q", [
    Lookup("v", "k|1"), MultiGet("v", ("a", "b"), fresh=FRESH),
    Scan("v", "a", "b", None, 7, "cur", fresh=FRESH), WindowScan("v", 1, 9, "p", 3),
    KeyWindows("v", "k", 2, 8), Aggregate("v", ("type",), ("count(*)", "sum(n)"), "p"),
    TopK("v", "n", 5, "asc", "p", "first"),
])
def test_every_query_type_is_read_back_as_sent(q: Query) -> None:
    assert codec.decode(*sent(q)) == q


@dataclass(frozen=True)
class Nearby(Query):
    """A query type of a test's own, with a bool and a float field."""

    kind = "test_nearby"
    lat: float
    lon: float
    open_now: bool = False
    within_km: float | None = None


@pytest.fixture
def nearby() -> Iterator[type[Nearby]]:
    assert KINDS["test_nearby"] is Nearby  # registered as it was defined
    yield Nearby
    codec._ADAPTERS.pop("test_nearby", None)


def test_a_query_type_with_bool_and_float_fields_travels(nearby: type[Nearby]) -> None:
    for q in (Nearby("shops", 52.5, 13.4, open_now=True, within_km=2.5),
              Nearby("shops", 52, 13, fresh=FRESH)):  # an int is a float too
        assert codec.decode(*sent(q)) == q


@pytest.mark.parametrize(("fields", "named"), [
    ({"view": "shops", "lat": "52.5", "lon": 1.0}, "lat"),  # a string is no float
    ({"view": "shops", "lat": 1.0, "lon": 1.0, "open_now": 1}, "open_now"),  # nor 1 a bool
    ({"view": "shops", "lat": 1.0, "lon": 1.0, "open_now": "yes"}, "open_now"),
    ({"view": "shops", "lat": 1.0}, "lon"),  # missing
    ({"view": "shops", "lat": 1.0, "lon": 1.0, "radius": 3}, "radius"),  # unknown
    ({"view": 7, "lat": 1.0, "lon": 1.0}, "view"),
    ({"view": "shops", "lat": 1.0, "lon": 1.0, "fresh": {"max_lag": "3"}}, "fresh.max_lag"),
    ({"view": "shops", "lat": 1.0, "lon": 1.0, "fresh": {"max_lag": True}}, "fresh.max_lag"),
    ({"view": "shops", "lat": 1.0, "lon": 1.0, "fresh": {"consistent": 1}}, "fresh.consistent"),
    ({"view": "shops", "lat": 1.0, "lon": 1.0, "fresh": {"nope": 1}}, "fresh.nope"),
    ({"view": "shops", "lat": 1.0, "lon": 1.0, "fresh": None}, "fresh"),
])
def test_a_field_that_does_not_fit_is_a_bad_request_naming_it(
        nearby: type[Nearby], fields: dict[str, Any], named: str) -> None:
    with pytest.raises(BadRequest, match=rf"malformed test_nearby query: {named}: "):
        codec.decode("test_nearby", fields)


@pytest.mark.parametrize(("fields", "named"), [
    ({"view": "v", "keys": ["a", 1]}, "keys.1"), ({"view": "v", "keys": "ab"}, "keys"),
    ({"view": "v", "key": "a"}, "keys"),
])
def test_the_built_in_types_are_checked_the_same_way(fields: dict[str, Any],
                                                    named: str) -> None:
    with pytest.raises(BadRequest, match=rf"malformed multiget query: {named}: "):
        codec.decode("multiget", fields)


def test_an_unknown_kind_or_a_body_not_an_object_is_refused() -> None:
    for kind, fields in (("nope", {"view": "v"}), ("lookup", ["v", "k"]), ("lookup", None)):
        with pytest.raises(BadRequest, match="not a query of this node"):
            codec.decode(kind, fields)


def _sent(body: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = orjson.loads(body)
    return doc


def test_a_subscription_is_a_typed_changes_query_on_the_wire() -> None:
    """Issue 48: a subscription's request is the typed ``Changes`` (its position as
    ``from``, the name every node reads), read back strictly as any query; the owner's
    lean lookup request reads back by hand as strictly."""
    from streamiq.serving.query.model import Changes

    q = Changes("balances", ("a1", "b2"), None, "balances-changelog:0:5", True)
    doc = _sent(codec.changes_request(q, [0, 2], 3, "Bearer t"))
    assert doc["k"] == "changes" and doc["q"]["from"] == "balances-changelog:0:5"
    assert codec.changes(doc["q"]) == q
    assert codec.changes({"view": "v"}) == Changes("v")
    for bad, name in (({"view": "v", "keys": [1]}, "keys"), ({"view": "v", "tail": "yes"},
                                                              "tail"),
                      ({"view": "v", "form": "x"}, "form"), ({"keys": ["a"]}, "view")):
        with pytest.raises(BadRequest, match=name):
            codec.changes(bad)
    lookup = _sent(codec.lookup_ask("balances", "a1", 3, None, 0.0).body([2]))
    assert codec.read_lookup(lookup) == ("balances", "a1", 2, 3, None)
    for broken in ({**lookup, "t": 7}, {**lookup, "p": [1.5]}, {**lookup, "q": {"view": 1}},
                   {k: v for k, v in lookup.items() if k != "n"}):
        with pytest.raises(BadRequest, match="malformed lookup"):
            codec.read_lookup(broken)
