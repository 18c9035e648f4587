"""Scatter-gather aggregation: ``group_by`` columns with count / sum / min / max / avg.

Each owner folds the rows of its partitions into mergeable partial states (``avg``
travels as ``[sum, count]``), the coordinating node merges the partials and finishes
them, so an average is exact however the partitions were split.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from streamiq.errors import BadRequest
from streamiq.serving.engines._json import loads_row
from streamiq.serving.engines.partials import AggregatePartial
from streamiq.serving.engines.scan import KeyRange
from streamiq.state.base import Store
from streamiq.views.base import View, decode_key

__all__ = ["FUNCS", "MAX_GROUPS", "Agg", "aggregate_partitions", "finish", "merge_partials",
           "parse_aggs", "parse_group_by"]

FUNCS = ("count", "sum", "min", "max", "avg")
_SPEC = re.compile(r"^\s*([A-Za-z]+)\s*\(\s*(\*|[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")


@dataclass(frozen=True)
class Agg:
    func: str
    column: str | None  # None: count(*)

    @property
    def name(self) -> str:
        return f"{self.func}({self.column or '*'})"


def _columns(view: View) -> str:
    return ", ".join(view.columns)


def parse_group_by(view: View, raw: Sequence[str] | None) -> list[str]:
    cols = [c.strip() for part in (raw or []) for c in part.split(",") if c.strip()]
    for c in cols:
        if c not in view.columns:
            raise ValueError(f"group_by: unknown column {c!r}; columns of {view.name}: "
                             f"{_columns(view)}")
    if len(set(cols)) != len(cols):
        raise ValueError("group_by: a column is named twice")
    return cols


def parse_aggs(view: View, raw: Sequence[str] | None) -> list[Agg]:
    out: list[Agg] = []
    for spec in raw or ["count(*)"]:
        m = _SPEC.match(spec)
        if m is None:
            raise ValueError(f"agg: {spec!r} is not FUNC(COLUMN); FUNC is one of "
                             f"{', '.join(FUNCS)}, e.g. sum(count) or count(*)")
        func, col = m.group(1).lower(), m.group(2)
        if func not in FUNCS:
            raise ValueError(f"agg: unknown function {m.group(1)!r} in {spec!r}; "
                             f"use one of {', '.join(FUNCS)}")
        if col == "*":
            if func != "count":
                raise ValueError(f"agg: {spec!r}: only count accepts *")
            out.append(Agg(func, None))
            continue
        if col not in view.columns:
            raise ValueError(f"agg: unknown column {col!r} in {spec!r}; columns of "
                             f"{view.name}: {_columns(view)}")
        if func in ("sum", "avg") and col in view.key_columns:
            raise ValueError(f"agg: {spec!r}: {col!r} is a key column (text); "
                             f"{func} needs a numeric value column")
        out.append(Agg(func, col))
    if len({a.name for a in out}) != len(out):
        raise ValueError("agg: an aggregate is named twice")
    return out


#: groups one aggregate may have: its answer is held in memory whole, on every node
MAX_GROUPS = 10_000


def too_many_groups() -> BadRequest:
    return BadRequest(f"the aggregate has more than {MAX_GROUPS} groups: group by fewer "
                      f"columns or narrow it with prefix=", field="group_by")


def _initial(agg: Agg) -> Any:
    return 0 if agg.func == "count" else [0, 0] if agg.func in ("sum", "avg") else None


def _folder(agg: Agg) -> Callable[[Any, Any], Any]:
    """The fold for ``agg``, chosen once per query rather than tested per row."""
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


def _pick(agg: Agg, a: Any, b: Any) -> Any:
    try:
        return min(a, b) if agg.func == "min" else max(a, b)
    except TypeError:  # e.g. a number and a string: no order between them
        raise ValueError(f"agg: {agg.name}: values of different types cannot be "
                         f"compared ({a!r}, {b!r})") from None


def _combine(agg: Agg, a: Any, b: Any) -> Any:
    if agg.func == "count":
        return a + b
    if agg.func in ("sum", "avg"):
        return [a[0] + b[0], a[1] + b[1]]
    if a is None or b is None:
        return b if a is None else a
    return _pick(agg, a, b)


def aggregate_partitions(view: View, store: Store, partitions: Iterable[int],
                         group_by: Sequence[str], aggs: Sequence[Agg],
                         rng: KeyRange | None = None) -> AggregatePartial:
    """Fold the partitions' rows into ``{"groups": {json(group): [state...]}, "rows": n}``."""
    rng = rng or KeyRange()
    needs_key = [c for c in [*group_by, *(a.column for a in aggs if a.column)]
                 if c in view.key_columns]
    key_idx = {c: view.key_columns.index(c) for c in view.key_columns}
    folds = [(i, a.column, _folder(a)) for i, a in enumerate(aggs)]
    groups: dict[Any, list[Any]] = {}
    n = 0
    if rng.empty:
        return {"groups": {}, "rows": 0}
    for p in partitions:
        for sk, raw in store.scan(p, rng.lo, rng.hi):
            row = loads_row(raw)
            if needs_key and any(c not in row for c in needs_key):
                parts = decode_key((sk[:-9] if view.windowed else sk).decode(errors="replace"))
                if len(parts) != len(view.key_columns):
                    continue  # stored before rows were checked (views/rows.py): not a row
                for c in needs_key:
                    row.setdefault(c, parts[key_idx[c]])
            gk: Any = tuple([row.get(c) for c in group_by])
            try:
                states = groups.get(gk)
            except TypeError:  # a value that cannot key a dict (a list, an object)
                gk = _Unhashable(json.dumps(list(gk)))
                states = groups.get(gk)
            if states is None:
                if len(groups) >= MAX_GROUPS:
                    raise too_many_groups()
                states = groups[gk] = [_initial(a) for a in aggs]
            for i, col, fold in folds:
                states[i] = fold(states[i], row.get(col) if col else None)
            n += 1
    return {"groups": {_group_json(gk): st for gk, st in groups.items()}, "rows": n}


class _Unhashable(str):
    """A group whose values cannot key a dict (a list, an object): keyed by its JSON.
    Other groups are keyed by their values' tuple and serialised once, at the end
    (``json.dumps`` per row cost as much as decoding the row)."""


def _group_json(key: Any) -> str:
    return str(key) if isinstance(key, _Unhashable) else json.dumps(list(key))


def merge_partials(aggs: Sequence[Agg], partials: Sequence[AggregatePartial]
                   ) -> tuple[dict[str, list[Any]], int]:
    merged: dict[str, list[Any]] = {}
    rows = 0
    for part in partials:
        rows += int(part["rows"])
        for gk, states in part["groups"].items():
            cur = merged.get(gk)
            if cur is None and len(merged) >= MAX_GROUPS:
                raise too_many_groups()
            merged[gk] = (list(states) if cur is None else
                          [_combine(a, x, y) for a, x, y in zip(aggs, cur, states, strict=True)])
    return merged, rows


def _sort_key(values: list[Any]) -> tuple[Any, ...]:
    """Groups in order: numbers, then text, then lists and objects (by their JSON), then
    null, so any mix of group values sorts without comparing unlike types."""
    return tuple(_rank(v) for v in values)


def _rank(v: Any) -> tuple[int, Any]:
    if v is None:
        return (3, 0)
    if isinstance(v, int | float):
        return (0, v)
    if isinstance(v, str):
        return (1, v)
    return (2, json.dumps(v, sort_keys=True))


def finish(group_by: Sequence[str], aggs: Sequence[Agg], merged: dict[str, list[Any]]
           ) -> list[dict[str, Any]]:
    """Final rows, sorted by group: ``{col: value, ..., "sum(count)": total, ...}``."""
    out: list[tuple[list[Any], dict[str, Any]]] = []
    for gk, states in merged.items():
        values = json.loads(gk)
        row: dict[str, Any] = dict(zip(group_by, values, strict=True))
        for a, st in zip(aggs, states, strict=True):
            if a.func == "sum":
                row[a.name] = st[0] if st[1] else None
            elif a.func == "avg":
                row[a.name] = st[0] / st[1] if st[1] else None
            else:
                row[a.name] = st
        out.append((values, row))
    out.sort(key=lambda vr: _sort_key(vr[0]))
    return [r for _, r in out]
