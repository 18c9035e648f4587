"""ViewSpec: JSON round trip, strict decoding, compatibility, the View a node builds."""

from __future__ import annotations

import dataclasses
import json
from typing import Any
from unittest.mock import Mock

import pytest

from streamiq.kafka.skips import Skip
from streamiq.views.catalog import ViewSpec, catalog_topic, incompatibility

SPEC = ViewSpec(name="page_views", key_columns=(("user_id", "string"),),
                value_columns=(("count", "bigint"), ("last", "timestamp")),
                changelog_topic="p.page_views-changelog", partitions=3)


def test_round_trip_and_json_form() -> None:
    raw = SPEC.to_json()
    assert ViewSpec.from_json(raw) == SPEC
    assert ViewSpec.from_json(raw.decode()) == SPEC
    d = json.loads(raw)
    assert d["version"] == 1 and d["global"] is False and d["windowed"] is False
    assert d["key_columns"] == [{"name": "user_id", "type": "string"}]
    assert d["value_columns"][1] == {"name": "last", "type": "timestamp"}
    g = dataclasses.replace(SPEC, is_global=True, windowed=True, window="1 minute",
                            description="d")
    assert ViewSpec.from_json(g.to_json()) == g
    assert d["ticks"] == []  # optional: a description without it has none
    assert ViewSpec.from_json(json.dumps({k: v for k, v in d.items() if k != "ticks"})) == SPEC
    t = dataclasses.replace(SPEC, ticks=("p-bank-transactions",))
    assert ViewSpec.from_json(t.to_json()).ticks == ("p-bank-transactions",)
    assert incompatibility(SPEC, t) is None  # a restart in another mode may change it


@pytest.mark.parametrize("raw", [
    b"{not json", b"[1]", b'"x"', b"\xff",
    json.dumps({**json.loads(SPEC.to_json()), "version": 2}).encode(),
    json.dumps({**json.loads(SPEC.to_json()), "partitions": "3"}).encode(),
    json.dumps({**json.loads(SPEC.to_json()), "partitions": 0}).encode(),
    json.dumps({**json.loads(SPEC.to_json()), "partitions": True}).encode(),
    json.dumps({**json.loads(SPEC.to_json()), "key_columns": []}).encode(),
    json.dumps({**json.loads(SPEC.to_json()), "key_columns": ["user_id"]}).encode(),
    json.dumps({**json.loads(SPEC.to_json()), "name": "bad name"}).encode(),
    json.dumps({k: v for k, v in json.loads(SPEC.to_json()).items() if k != "global"}).encode(),
])
def test_from_json_refuses_what_is_not_a_description(raw: bytes) -> None:
    with pytest.raises(ValueError):
        ViewSpec.from_json(raw)


def test_a_column_named_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="named twice"):
        dataclasses.replace(SPEC, value_columns=(("user_id", "bigint"),))


def test_value_columns_may_be_added() -> None:
    more = dataclasses.replace(SPEC, value_columns=(*SPEC.value_columns, ("sum", "double")),
                               description="now with sums")
    assert incompatibility(SPEC, more) is None
    assert incompatibility(SPEC, SPEC) is None


@pytest.mark.parametrize(("change", "why"), [
    ({"key_columns": (("user", "string"),)}, "key columns changed"),
    ({"key_columns": (("user_id", "bigint"),)}, "key columns changed"),
    ({"key_columns": (("user_id", "string"), ("day", "date"))}, "key columns changed"),
    ({"windowed": True}, "windowed changed from false to true"),
    ({"changelog_topic": "other"}, "changelog topic changed"),
    ({"partitions": 6}, "partitions changed from 3 to 6"),
    ({"is_global": True}, "global changed"),
    ({"value_columns": (("count", "int"), ("last", "timestamp"))},
     "value column 'count' changed type from bigint to int"),
    ({"value_columns": (("count", "bigint"),)}, "value column 'last' (timestamp) was removed"),
])
def test_incompatible_changes_say_what_changed(change: dict[str, Any], why: str) -> None:
    got = incompatibility(SPEC, dataclasses.replace(SPEC, **change))
    assert got is not None and got.startswith(why), got


def test_to_view_needs_no_user_code() -> None:
    v = SPEC.to_view()
    assert v.name == "page_views" and v.key_columns == ("user_id",)
    assert v.value_columns == ("count", "last") and not v.windowed and not v.is_global
    assert v.parse_key("u1") == {"user_id": "u1"}
    with pytest.raises(RuntimeError, match="no transform"):
        v.transform(Mock())  # any DataFrame: it is not looked at
    w = dataclasses.replace(SPEC, windowed=True, window="1 minute", is_global=True).to_view()
    assert w.windowed and w.window == "1 minute" and w.is_global
    assert w.columns[1:3] == ("window_start", "window_end")


def test_catalog_topic_is_per_cluster() -> None:
    assert catalog_topic("prod") == "_streamiq-prod-catalog"


@pytest.mark.parametrize(("change", "reason"), [
    ({"changelog_topic": "x" * 250}, "bad_name"),
    ({"changelog_topic": "a b"}, "bad_name"),
    ({"name": "v" * 300}, "bad_name"),
    ({"key_columns": [{"name": "k\n", "type": "string"}]}, "bad_name"),
    ({"value_columns": [{"name": "c", "type": "t" * 2000}]}, "bad_name"),
    ({"value_columns": [{"name": f"c{i}", "type": "int"} for i in range(512)]},
     "too_many_columns"),
    ({"description": "d" * 5000}, "too_large"),
    ({"window": "w" * 5000}, "too_large"),
    ({"version": [1]}, "bad_version"),
    ({"partitions": 0.5}, "bad_spec"),
    ({"ticks": "t"}, "bad_spec"),
    ({"ticks": ["a b"]}, "bad_spec"),
    ({"ticks": [f"t{i}" for i in range(65)]}, "bad_spec"),
])
def test_claims_out_of_bounds_are_refused_with_a_reason(change: dict[str, Any],
                                                        reason: str) -> None:
    raw = json.dumps({**json.loads(SPEC.to_json()), **change}).encode()
    with pytest.raises(Skip) as err:
        ViewSpec.from_json(raw)
    assert err.value.reason == reason


def test_any_bytes_decode_to_a_spec_or_a_skip() -> None:
    for raw in (b"[" * 100_000, b"\xff", b"", b"1e999999", b"9" * 10_000, b"x" * (300 << 10)):
        with pytest.raises(Skip):
            ViewSpec.from_json(raw)
