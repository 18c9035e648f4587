"""The built-in planner rules (``rules.py``): ``ORDER BY column [ASC|DESC] LIMIT k`` is
the owners' top-k (``query/topk.py``)."""

from __future__ import annotations

from sqlglot import exp

from streamiq.serving.query.topk import MAX_K, TopK
from streamiq.serving.sql.engine import ViewInfo
from streamiq.serving.sql.rules import NUMERIC, asks_only, pushdown

__all__ = ["MAX_TOP", "top_k"]

#: the largest LIMIT pushed down as a top-k (the query layer's MAX_K); past it the rows
#: are gathered for DuckDB
MAX_TOP = MAX_K


@pushdown
def top_k(sel: exp.Select, view: ViewInfo) -> TopK | None:
    """``ORDER BY column [ASC|DESC] [NULLS ...] LIMIT k`` with nothing else asked of the
    view's rows (no WHERE, grouping, DISTINCT, OFFSET, window or aggregate), over a
    numeric column that is not a key: the owners' top-k holds the answer's rows, nulls
    where PostgreSQL puts them (first for DESC unless asked otherwise)."""
    order, limit = sel.args.get("order"), sel.args.get("limit")
    value = limit.expression if isinstance(limit, exp.Limit) else None
    if order is None or len(order.expressions) != 1 or not isinstance(value, exp.Literal) \
            or value.is_string or not str(value.this).isdigit() \
            or not asks_only(sel, "order", "limit"):
        return None
    by, k = order.expressions[0], int(value.this)
    col = by.this if isinstance(by, exp.Ordered) else None
    types = {c.name: c.type.split("(")[0].strip().lower() for c in view.columns}
    if not isinstance(col, exp.Column) or col.name not in types or not 1 <= k <= MAX_TOP \
            or col.name in view.key_columns or types[col.name] not in NUMERIC:
        return None
    if any(e.alias_or_name == col.name and not (  # an output column of that name orders
            isinstance(e.unalias(), exp.Column) and e.unalias().name == col.name)
            for e in sel.expressions if not isinstance(e, exp.Star)):
        return None
    desc = bool(by.args.get("desc"))
    return TopK(view.name, col.name, k, "desc" if desc else "asc",
                nulls="first" if by.args.get("nulls_first") else "last")
