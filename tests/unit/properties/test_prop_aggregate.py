"""An owner's partial aggregate (serving/engines/aggregate.py) is what the row-at-a-time
fold it replaced gave, for any rows: batches decoded in one orjson call, the loops
chosen per query, groups keyed by one value or a tuple. ``reference`` is that fold as
it was (each row decoded by ``loads_row``, a fold function per aggregate); both must
give the same groups and count, or both refuse the data (ValueError)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamiq.serving.engines import aggregate as agg_module
from streamiq.serving.engines._json import loads_row, loads_rows
from streamiq.serving.engines.aggregate import (
    MAX_GROUPS,
    Agg,
    _group_json,
    _initial,
    _pick,
    _Unhashable,
    aggregate_partitions,
)
from streamiq.state import Checkpoint, MemoryStore
from streamiq.views.base import decode_key
from streamiq.views.orders import ORDER_COUNTS


def _folder(agg: Agg) -> Callable[[Any, Any], Any]:
    if agg.func == "count":
        if agg.column is None:
            return lambda state, _value: state + 1
        return lambda state, value: state if value is None else state + 1
    if agg.func in ("sum", "avg"):
        def add(state: list[Any], value: Any) -> list[Any]:
            if value is None:
                return state
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ValueError(f"agg: {agg.name}: non-numeric value {value!r}")
            state[0] += value
            state[1] += 1
            return state
        return add

    def pick(state: Any, value: Any) -> Any:
        if value is None:
            return state
        return value if state is None else _pick(agg, state, value)
    return pick


def reference(store: MemoryStore, group_by: Sequence[str], aggs: Sequence[Agg]) -> Any:
    view = ORDER_COUNTS
    needs_key = [c for c in [*group_by, *(a.column for a in aggs if a.column)]
                 if c in view.key_columns]
    key_idx = {c: view.key_columns.index(c) for c in view.key_columns}
    folds = [(i, a.column, _folder(a)) for i, a in enumerate(aggs)]
    groups: dict[Any, list[Any]] = {}
    n = 0
    for sk, raw in store.scan(0):
        row = loads_row(raw)
        if needs_key and any(c not in row for c in needs_key):
            parts = decode_key(sk.decode(errors="replace"))
            if len(parts) != len(view.key_columns):
                continue
            for c in needs_key:
                row.setdefault(c, parts[key_idx[c]])
        gk: Any = tuple([row.get(c) for c in group_by])
        try:
            states = groups.get(gk)
        except TypeError:
            gk = _Unhashable(json.dumps(list(gk)))
            states = groups.get(gk)
        if states is None:
            assert len(groups) < MAX_GROUPS
            states = groups[gk] = [_initial(a) for a in aggs]
        for i, col, fold in folds:
            states[i] = fold(states[i], row.get(col) if col else None)
        n += 1
    return {"groups": {_group_json(gk): s for gk, s in groups.items()}, "rows": n}


scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from(["GENERAL", "RESTAURANT", "x"]))
values = st.one_of(scalars, st.lists(scalars, max_size=2))
rows = st.lists(st.fixed_dictionaries(
    {"store": st.sampled_from(["s1", "s2", "s3"])},
    optional={"type": st.sampled_from(["GENERAL", "RESTAURANT"]), "count": values,
              "revenue": values}), max_size=12)
group_bys = st.sampled_from([[], ["type"], ["store"], ["count"], ["revenue"],
                             ["type", "count"], ["store", "revenue"]])
agg_lists = st.lists(st.sampled_from([
    Agg("count", None), Agg("count", "revenue"), Agg("sum", "count"), Agg("avg", "revenue"),
    Agg("min", "revenue"), Agg("max", "count"), Agg("min", "type")]), min_size=1, max_size=4,
    unique_by=lambda a: a.name)


def _outcome(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except ValueError as exc:
        return ("refused", str(exc).split(":")[0])


@given(rows, group_bys, agg_lists, st.sampled_from([1, 2, 1024]))
def test_the_partial_is_the_row_at_a_time_fold_s(data: list[dict[str, Any]], group_by: list[str],
                                                  aggs: list[Agg], batch: int) -> None:
    store = MemoryStore()
    puts = {}
    for i, row in enumerate(data):
        key = f"{row['store']}|{row.get('type', 'GENERAL')}" if i % 3 else f"{row['store']}{i}"
        puts[key.encode()] = json.dumps(row).encode()
    store.apply(0, list(puts.items()), Checkpoint(offset=len(puts)))
    old = agg_module._BATCH
    agg_module._BATCH = batch
    try:
        got = _outcome(lambda: aggregate_partitions(ORDER_COUNTS, store, [0], group_by, aggs))
    finally:
        agg_module._BATCH = old
    assert got == _outcome(lambda: reference(store, group_by, aggs))


@given(st.lists(st.dictionaries(st.text(max_size=3), values, max_size=3), max_size=6))
def test_rows_decoded_in_one_call_are_loads_row_s(docs: list[dict[str, Any]]) -> None:
    raws = [json.dumps(d).encode() for d in docs]
    assert loads_rows(raws) == [loads_row(r) for r in raws]


@pytest.mark.parametrize("raws", [
    [b'{"a": 1},{"b": 2}'],  # two objects in one stored value
    [b"[1, 2]", b'{"a": 1}'],  # not an object
    [b'{"a": NaN}'],  # orjson refuses, json.loads takes
    [b'{"a": 123456789012345678901234}'],  # past 64 bits: an int, not a float
])
def test_batches_orjson_cannot_decode_as_one_are_decoded_row_by_row(raws: list[bytes]) -> None:
    def each() -> Any:
        try:
            return [loads_row(r) for r in raws]
        except ValueError as exc:
            return type(exc)

    def batch() -> Any:
        try:
            return loads_rows(raws)
        except ValueError as exc:
            return type(exc)

    assert batch() == each()
