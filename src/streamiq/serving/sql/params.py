"""The type of each parameter ``$n`` of a statement, from what it is compared with, as
PostgreSQL infers it: ``balance > $1`` makes ``$1`` numeric, ``account = ANY($1)`` an
array of text, ``$1::int`` an integer, ``LIMIT $1`` a bigint; anything else text.

Clients that encode parameters by the described types rely on it: asyncpg refuses an
int for a parameter described as text, pgjdbc sends ``setBigDecimal`` as numeric.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlglot import exp

from streamiq.serving.sql.engine import ViewInfo
from streamiq.serving.sql.plans import marker_number
from streamiq.serving.sql.types import TEXT_OID, array_oid, duck_of_spark, oid_of

__all__ = ["param_types"]

_BIGINT = 20
_BIGINT_ARRAY, _OID_ARRAY = 1016, 1028
_COMPARED = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ,
             exp.NullSafeNEQ, exp.Add, exp.Sub, exp.Mul, exp.Div)


#: sqlglot's DuckDB names of cast targets -> the names ``types.oid_of`` knows
_CAST_NAMES = {"INT": "INTEGER", "TEXT": "VARCHAR", "REAL": "FLOAT", "NUMERIC": "DECIMAL",
               "TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE", "BOOL": "BOOLEAN", "INT8": "BIGINT",
               "INT4": "INTEGER", "INT2": "SMALLINT", "FLOAT8": "DOUBLE", "FLOAT4": "FLOAT"}


_OID = 26  # PostgreSQL's oid type (catalog queries compare their oid columns with $n::oid)


def _cast_oid(to: exp.DataType) -> int:
    name = to.sql("duckdb").upper()
    array = name.endswith("[]")
    base = name.removesuffix("[]")
    oid = _OID if base == "OID" else oid_of(_CAST_NAMES.get(base.split("(")[0], base))
    return array_oid(oid) if array else oid


def _column_oid(col: exp.Column, tables: Mapping[str, ViewInfo]) -> int | None:
    views = [tables[col.table]] if col.table in tables else (
        list(tables.values()) if not col.table else [])
    for view in views:
        for c in view.columns:
            if c.name == col.name:
                return oid_of(duck_of_spark(c.type))
    return None


def _oid_of_expr(e: exp.Expr, tables: Mapping[str, ViewInfo]) -> int | None:
    if isinstance(e, exp.Column):
        return _column_oid(e, tables)
    if isinstance(e, exp.Cast):
        return _cast_oid(e.to)
    return None


def _up(node: exp.Expr) -> tuple[exp.Expr, exp.Expr | None]:
    """(the node as its parent sees it, that parent), parentheses skipped."""
    while isinstance(node.parent, exp.Paren):
        node = node.parent
    return node, node.parent


def _oid(lit: exp.Literal, tables: Mapping[str, ViewInfo]) -> int | None:
    node, parent = _up(lit)
    if isinstance(parent, exp.Cast):
        return _cast_oid(parent.to)
    if isinstance(parent, exp.Limit | exp.Offset | exp.Fetch):
        return _BIGINT
    if isinstance(parent, exp.Any):  # x = ANY($1): an array of x's type
        _, cmp = _up(parent)
        if isinstance(cmp, exp.Binary):
            inner = _oid_of_expr(cmp.left, tables)
            return None if inner is None else array_oid(inner)
        return None
    if isinstance(parent, _COMPARED):
        other = parent.right if node is parent.left else parent.left
        return _oid_of_expr(other, tables)
    if isinstance(parent, exp.In | exp.Between):
        return None if node is parent.this else _oid_of_expr(parent.this, tables)
    return None


def param_types(tree: exp.Expr, tables: Mapping[str, ViewInfo]) -> tuple[int, ...]:
    """Parameter ``$n``'s type oid at index ``n - 1`` (``tables``: the views read, by
    the name or alias the statement gives them; none: a catalog query, whose bigint
    arrays are oid[]); text where nothing tells."""
    found: dict[int, int] = {}
    for lit in tree.find_all(exp.Literal):
        n = marker_number(lit.this) if lit.is_string else None
        if n is None:
            continue
        oid = _oid(lit, tables)
        if oid is not None and found.get(n, TEXT_OID) == TEXT_OID:
            found[n] = oid
        found.setdefault(n, TEXT_OID)
    oids = (found.get(i, TEXT_OID) for i in range(1, max(found, default=0) + 1))
    return tuple(_OID_ARRAY if oid == _BIGINT_ARRAY and not tables else oid for oid in oids)
