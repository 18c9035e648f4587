"""The catalog follower: which descriptions a node serves, replaces or refuses."""

from __future__ import annotations

import dataclasses

from streamiq.serving.discovery import Discovery
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
