"""Scatter-gather aggregation: ``group_by`` columns with count / sum / min / max / avg.

Each owner folds the rows of its partitions into mergeable partial states (``avg``
travels as ``[sum, count]``), the coordinating node merges the partials and finishes
them, so an average is exact however the partitions were split.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from streamiq.serving.scan import KeyRange
from streamiq.state.base import Store
from streamiq.views.base import View, decode_key

__all__ = ["FUNCS", "Agg", "aggregate_partitions", "finish", "merge_partials", "parse_aggs",
           "parse_group_by"]

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


def _initial(agg: Agg) -> Any:
    return 0 if agg.func == "count" else [0, 0] if agg.func in ("sum", "avg") else None


def _fold(agg: Agg, state: Any, value: Any) -> Any:
    if agg.func == "count":
        return state + (1 if agg.column is None or value is not None else 0)
    if value is None:
        return state
    if agg.func in ("sum", "avg"):
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"agg: {agg.name}: non-numeric value {value!r}")
        state[0] += value
        state[1] += 1
        return state
    if state is None:
        return value
    return _pick(agg, state, value)


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
                         rng: KeyRange | None = None) -> dict[str, Any]:
    """Fold the partitions' rows into ``{"groups": {json(group): [state...]}, "rows": n}``."""
    rng = rng or KeyRange()
    needs_key = [c for c in [*group_by, *(a.column for a in aggs if a.column)]
                 if c in view.key_columns]
    key_idx = {c: view.key_columns.index(c) for c in view.key_columns}
    groups: dict[str, list[Any]] = {}
    n = 0
    if rng.empty:
        return {"groups": groups, "rows": 0}
    for p in partitions:
        for sk, raw in store.scan(p, rng.lo, rng.hi):
            row = json.loads(raw)
            if needs_key and any(c not in row for c in needs_key):
                parts = decode_key((sk[:-9] if view.windowed else sk).decode())
                for c in needs_key:
                    row.setdefault(c, parts[key_idx[c]])
            gk = json.dumps([row.get(c) for c in group_by])
            states = groups.get(gk)
            if states is None:
                states = groups[gk] = [_initial(a) for a in aggs]
            for i, a in enumerate(aggs):
                states[i] = _fold(a, states[i], row.get(a.column) if a.column else None)
            n += 1
    return {"groups": groups, "rows": n}


def merge_partials(aggs: Sequence[Agg], partials: Sequence[dict[str, Any]]
                   ) -> tuple[dict[str, list[Any]], int]:
    merged: dict[str, list[Any]] = {}
    rows = 0
    for part in partials:
        rows += int(part.get("rows", 0))
        for gk, states in part.get("groups", {}).items():
            cur = merged.get(gk)
            merged[gk] = (list(states) if cur is None else
                          [_combine(a, x, y) for a, x, y in zip(aggs, cur, states, strict=True)])
    return merged, rows


def _sort_key(values: list[Any]) -> tuple[Any, ...]:
    return tuple((v is None, isinstance(v, str), 0 if v is None else v) for v in values)


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
