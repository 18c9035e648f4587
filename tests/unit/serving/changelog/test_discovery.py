"""The catalog follower: which descriptions a node serves, replaces or refuses."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

from streamiq.serving.changelog.discovery import Discovery
from streamiq.supervise import Supervisor
from streamiq.views.catalog import ViewSpec

SPEC = ViewSpec(name="page_views", key_columns=(("user_id", "string"),),
                value_columns=(("count", "bigint"),), changelog_topic="pv-changelog",
                partitions=3)


def _discovery(refuse: str | None = None) -> tuple[Discovery, list[ViewSpec]]:
    served: list[ViewSpec] = []

    def serve(spec: ViewSpec) -> None:
        if refuse is not None:
            raise ValueError(refuse)
        served.append(spec)

    return Discovery({}, "catalog", serve, Supervisor()), served


def test_a_new_view_is_served_once_and_a_repeat_changes_nothing() -> None:
    d, served = _discovery()
    d.receive(SPEC.to_json())
    d.receive(SPEC.to_json())  # every sink start publishes again
    assert served == [SPEC] and d.specs == {"page_views": SPEC} and d.refused == {}


def test_a_compatible_change_replaces_the_description() -> None:
    d, served = _discovery()
    d.receive(SPEC.to_json())
    wider = dataclasses.replace(SPEC, value_columns=(("count", "bigint"), ("last", "bigint")))
    d.receive(wider.to_json())
    assert served == [SPEC, wider] and d.specs["page_views"] == wider


def test_an_incompatible_change_is_refused_and_the_old_description_kept() -> None:
    d, served = _discovery()
    d.receive(SPEC.to_json())
    for changed in (dataclasses.replace(SPEC, partitions=6),
                    dataclasses.replace(SPEC, key_columns=(("user", "string"),)),
                    dataclasses.replace(SPEC, value_columns=(("count", "string"),))):
        d.receive(changed.to_json())
        assert "page_views" in d.refused, changed
        assert d.specs["page_views"] == SPEC and served == [SPEC]
    d.receive(SPEC.to_json())  # the writer went back to the served description
    assert d.refused == {}


def test_records_that_are_not_descriptions_are_skipped_and_counted() -> None:
    d, served = _discovery()
    for raw in (b"", b"{not json", b"[]", b'{"version": 99}', None,
                b'{"version": 1, "name": "../x"}'):
        d.receive(raw)
    assert d.skipped == 6 and served == [] and d.specs == {}


def test_a_view_the_node_cannot_serve_is_refused_with_the_reason() -> None:
    d, _ = _discovery(refuse="this node's app describes it otherwise")
    d.receive(SPEC.to_json())
    assert d.refused == {"page_views": "this node's app describes it otherwise"}
    assert d.specs == {}


def _record(**fields: object) -> bytes:
    return json.dumps({**json.loads(SPEC.to_json()), **fields}).encode()


def test_any_bytes_any_nesting_any_size_is_skipped_with_a_reason() -> None:
    d, served = _discovery()
    records = {b"[" * 100_000: "not_json", b"\xff\xfe": "not_json", b"7": "not_object",
               b"{" + b" " * (300 << 10) + b"}": "too_large",
               _record(version="1"): "bad_version", _record(partitions=-1): "bad_spec",
               _record(changelog_topic="a/b"): "bad_name",
               _record(value_columns=[{"name": f"c{i}", "type": "int"} for i in range(600)]):
                   "too_many_columns",
               _record(key_columns=[{"name": "\x00", "type": "string"}]): "bad_name"}
    for raw in records:
        d.receive(raw)
    assert served == [] and d.specs == {}
    assert d.skips.reasons == Counter(records.values())
    d.receive(SPEC.to_json())  # the part carries on
    assert served == [SPEC]


def test_a_huge_partition_count_is_refused_and_counted() -> None:
    d, served = _discovery()
    d.receive(_record(partitions=10**9))
    d.receive(_record(name="edge", partitions=256))  # the default bound itself is fine
    assert [s.name for s in served] == ["edge"]
    assert d.skips.reasons == Counter({"too_many_partitions": 1})
    assert "max_view_partitions" in d.refused["page_views"]


def test_views_beyond_max_views_are_refused_and_counted() -> None:
    served: list[ViewSpec] = []
    d = Discovery({}, "catalog", served.append, Supervisor(), max_views=2)
    for i in range(4):
        d.receive(_record(name=f"v{i}"))
    d.receive(_record(name="v0", value_columns=[{"name": "count", "type": "bigint"},
                                                {"name": "x", "type": "int"}]))
    assert [s.name for s in served] == ["v0", "v1", "v0"]  # a known view may still change
    assert d.skips.reasons == Counter({"too_many_views": 2}) and set(d.refused) == {"v2", "v3"}


def test_refused_views_remembered_are_bounded() -> None:
    d, _ = _discovery()
    for i in range(1000):
        d.receive(_record(name=f"v{i}", partitions=10**6))
    assert d.skipped == 1000 and len(d.refused) <= 256
