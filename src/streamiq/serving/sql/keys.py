"""A WHERE clause's conditions on a view's key, as the read the owners can answer.

Keys are the key columns' values joined by ``|`` (``views/base.py``), stored in byte
order, so: equality on every key column (``=``, ``IN``, ``= ANY(array)``) is a set of
keys (a lookup or a multi-get); a
``LIKE 'x%'`` on the first key column is a key prefix; a range on the first key column
is a key range, its conditions intersected (``>= 'a' AND < 'b'`` reads the keys from
``a`` to ``b``, not every key from ``a`` on). A range is widened to cover every key
whose first column is in it (``b|...`` for ``<= 'b'``), so it is never exact: DuckDB
applies the condition.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from sqlglot import exp

from streamiq.serving.sql.engine import Bounds, ViewInfo
from streamiq.serving.sql.plans import Lookup, Scan, Source, has_marker

__all__ = ["key_source"]

KEY_SEP = "|"
_PAST_SEP = chr(ord(KEY_SEP) + 1)  # just past "x|...": the end of the keys starting "x|"
_LIKE_SPECIAL = ("%", "_", "\\", KEY_SEP)  # a key column never holds KEY_SEP


def _value(e: exp.Expr) -> str | None:
    if isinstance(e, exp.Literal):
        return str(e.this)
    if isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal) and not e.this.is_string:
        return f"-{e.this.this}"
    return None


def _any(node: exp.Any) -> list[str | None]:
    """``= ANY(ARRAY['a', 'b'])``: its values; ``= ANY($1)``: the parameter's marker
    (the plan's keys take its elements when it is bound)."""
    inner = node.this.this if isinstance(node.this, exp.Paren) else node.this
    if isinstance(inner, exp.Array):
        return [_value(e) for e in inner.expressions] or [None]
    if isinstance(inner, exp.Literal) and inner.is_string and has_marker(inner.this):
        return [str(inner.this)]
    return [None]


def _column(c: exp.Expr, view: ViewInfo) -> str | None:
    col = c.this if isinstance(c, exp.Predicate) else None
    return col.name if isinstance(col, exp.Column) and col.name in view.names else None


def _equalities(view: ViewInfo, conds: Sequence[exp.Expr]
                ) -> tuple[dict[str, list[str]], int]:
    """Key column -> its allowed values, and how many conditions that used."""
    eq: dict[str, list[str]] = {}
    used = 0
    for c in conds:
        col = _column(c, view)
        if col not in view.key_columns or col in eq:
            continue
        vals: list[str | None] = []
        if isinstance(c, exp.EQ) and isinstance(c.expression, exp.Any):
            vals = _any(c.expression)
        elif isinstance(c, exp.EQ):
            vals = [_value(c.expression)]
        elif isinstance(c, exp.In) and not c.args.get("query"):
            vals = [_value(e) for e in c.expressions]
        if vals and all(v is not None for v in vals):
            eq[col] = list(dict.fromkeys(v for v in vals if v is not None))
            used += 1
    return eq, used


def _prefix(c: exp.Expr) -> str | None:
    if not isinstance(c, exp.Like) or not c.expression.is_string:
        return None
    pattern = str(c.expression.name)
    body = pattern[:-1]
    if not pattern.endswith("%") or not body or any(ch in body for ch in _LIKE_SPECIAL):
        return None
    return body


def _range(c: exp.Expr) -> Bounds | None:
    """Bounds covering every key whose first column satisfies ``c``."""
    if isinstance(c, exp.Between):
        lo, hi = _value(c.args["low"]), _value(c.args["high"])
        return Bounds(start=lo, end=hi + _PAST_SEP) if lo and hi else None
    v = _value(c.expression) if isinstance(c, exp.Binary) else None
    if v is None:
        return None
    if isinstance(c, exp.GT | exp.GTE):
        return Bounds(start=v)
    if isinstance(c, exp.LT | exp.LTE):
        return Bounds(end=v + _PAST_SEP)
    return None


def key_source(view: ViewInfo, conds: Sequence[exp.Expr]) -> tuple[Source | None, bool]:
    """The narrowest read covering the rows ``conds`` (ANDed) allow, and whether it is
    exact (the read's rows are exactly those: nothing left for DuckDB to filter)."""
    eq, used = _equalities(view, conds)
    if all(k in eq for k in view.key_columns):
        keys = tuple(KEY_SEP.join(p) for p in itertools.product(
            *(eq[k] for k in view.key_columns)))
        return Lookup(view.name, keys), used == len(conds)
    on_first = [c for c in conds if _column(c, view) == view.key_columns[0]]
    for c in on_first:
        prefix = _prefix(c)
        if prefix is not None:
            return Scan(view.name, Bounds(prefix=prefix)), len(conds) == 1
    ranges = [b for c in on_first if (b := _range(c)) is not None]
    if not ranges:
        return None, False
    return Scan(view.name, _intersect(ranges)), False


def _intersect(ranges: Sequence[Bounds]) -> Bounds:
    """A range covering the keys every one of ``ranges`` covers: the highest start and
    the lowest end among those known when planning (keys compare as UTF-8 bytes); a
    parameter's (``$n``, known at Bind) is used only when no value is given."""
    starts = [b.start for b in ranges if b.start is not None]
    ends = [b.end for b in ranges if b.end is not None]
    return Bounds(start=_tightest(starts, max), end=_tightest(ends, min))


def _tightest(bounds: list[str], pick: Callable[..., str]) -> str | None:
    known = [b for b in bounds if not has_marker(b)]
    if known:
        return pick(known, key=str.encode)
    return bounds[0] if bounds else None

