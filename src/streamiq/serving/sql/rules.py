"""Planner rules: how a query type is pushed down from SQL, one function each.

A rule looks at a ``SELECT`` that reads one view directly (no join, CTE or subquery
between it and the rows; grouping is the aggregate's, tried first) and returns the
query (a ``query/`` object) whose result's rows hold the statement's answer, or None.
The planner tries the rules in order and plans the first query as ``plans.Pushed``:
the query layer runs it, DuckDB runs the statement over its rows. Rules take literals
only (a statement with parameters is not theirs) and bound the rows they ask for.

A new query type's SQL pushdown is one rule (``@pushdown``) in its own module;
``pushdowns.py`` holds the built-in ones.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from streamiq.serving.query.model import Query
from streamiq.serving.sql.engine import ViewInfo

__all__ = ["NUMERIC", "PUSHDOWNS", "QUERY_TAIL", "Rule", "asks_only", "pushdown"]

#: (a SELECT of one view, the view) -> the query that answers it, or None
Rule = Callable[[exp.Select, ViewInfo], Query | None]

#: every rule, tried in order
PUSHDOWNS: list[Rule] = []

#: Spark types whose values are JSON numbers (``views/rows.py`` checks a row's types)
NUMERIC = frozenset({"tinyint", "smallint", "int", "integer", "bigint", "long", "float",
                     "double", "real", "decimal"})
#: a SELECT's clauses past its WHERE (what else a statement asks of the view's rows)
QUERY_TAIL = ("order", "limit", "offset", "distinct", "having", "qualify", "group", "joins",
              "laterals", "windows", "pivots")


def pushdown(rule: Rule) -> Rule:
    """Register ``rule`` (a decorator)."""
    PUSHDOWNS.append(rule)
    return rule


def asks_only(sel: exp.Select, *clauses: str) -> bool:
    """``sel`` asks nothing of the view's rows beyond ``clauses`` (of WHERE and
    ``QUERY_TAIL``) and its select list: no other clause, no aggregate or window."""
    return not any(sel.args.get(k) for k in ("where", *QUERY_TAIL) if k not in clauses) \
        and not sel.find(exp.AggFunc, exp.Window)
