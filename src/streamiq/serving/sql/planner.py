"""SQL -> a plan (``plans``): sqlglot parses PostgreSQL, we choose what the owners do.

* ``key = v`` / ``IN (...)`` on every key column: a routed lookup or multi-get;
* ``LIKE 'x%'`` on the first key column: a prefix scan; ``<``, ``>``, ``BETWEEN``: a
  range scan over a superset of the keys (DuckDB then applies the exact condition);
* a query type's own pushdown, its planner rule's (``rules.py``), e.g. ``ORDER BY column
  [ASC|DESC] LIMIT k`` of one view, nothing else asked of its rows: the owners' top-k
  (``pushdowns.py``), DuckDB then ordering those k rows;
* ``GROUP BY`` columns with count/sum/min/max/avg (and at most a ``LIKE 'x%'`` key
  filter): the scatter-gather aggregate, HAVING/ORDER BY/LIMIT over its groups;
* anything else (joins, expressions, window functions, ORDER BY, LIMIT): the views'
  rows gathered (each with its own key filter pushed where one applies) and the
  statement run by DuckDB, transpiled postgres -> duckdb by sqlglot.

A plan's rows skip DuckDB (``direct``) when the select list is plain columns and the
pushdown consumed the whole WHERE.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.optimizer.simplify import simplify

from streamiq.errors import BadSql, TooComplex, UnknownView
from streamiq.serving.sql.engine import ViewInfo
from streamiq.serving.sql.keys import key_source
from streamiq.serving.sql.params import param_types
from streamiq.serving.sql.pgshims import keyword_call
from streamiq.serving.sql.plans import (
    AGG_TABLE,
    Aggregate,
    CatalogQuery,
    Direct,
    Fetch,
    Gather,
    Plan,
    Pushed,
    Scan,
    Source,
    marker,
)
from streamiq.serving.sql.pushdowns import MAX_TOP
from streamiq.serving.sql.rules import PUSHDOWNS, QUERY_TAIL

__all__ = ["MAX_DEPTH", "MAX_TOP", "parse", "plan", "prepare"]

#: parentheses a statement may nest: sqlglot recurses about 20 Python frames per level
#: (past ~45 levels it hits Python's recursion limit); PostgreSQL answers 54001 at its
#: stack depth limit too, only deeper
MAX_DEPTH = 32

CATALOG_SCHEMAS = frozenset({"pg_catalog", "information_schema"})
_AGGS: dict[type[exp.Expr], str] = {exp.Count: "count", exp.Sum: "sum", exp.Min: "min",
                                          exp.Max: "max", exp.Avg: "avg"}


class _NotPushable(Exception):
    pass


#: a quoted string or identifier (kept as it is), a parameter ``$n`` (group 1), a cast
#: to ``oid[]`` (group 2: sqlglot reads ``oid[`` as a subscript; asyncpg's type lookup),
#: or a keyword PostgreSQL takes as a name where sqlglot does not (group 3: Metabase's
#: ``AS update``, ``t.select``), quoted
_PARAMS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|\$(\d+)|"
                     r"(::\s*(?:pg_catalog\.)?oid\s*\[\s*\])|"
                     r"(?:(?<=\bAS )|(?<=\.))(select|insert|update|delete|table)\b", re.I)
_PARENS = re.compile(r"[()]")


def _marked(m: re.Match[str]) -> str:
    if m.group(1) is not None:
        return f"'{marker(int(m.group(1)))}'"
    if m.group(3) is not None:
        return f'"{m.group(3).lower()}"'
    return "::bigint[]" if m.group(2) is not None else m.group(0)


def _mark(sql: str) -> str:
    """``$n`` -> its marker string (sqlglot 30 cannot tokenize ``($1,$2)`` itself)."""
    return _PARAMS.sub(_marked, sql)


def _pg_name(e: exp.Expr, text: str) -> str | None:
    """PostgreSQL's name for an unnamed select item (``count(*)`` is ``count``,
    ``now()`` is ``now``): a function's name as ``text`` writes it."""
    if isinstance(e, exp.Column | exp.Star | exp.Alias):
        return None
    if isinstance(e, exp.Cast):
        return e.this.name if isinstance(e.this, exp.Column) else _pg_name(e.this, text)
    if isinstance(e, exp.Window):
        return _pg_name(e.this, text)
    if isinstance(e, exp.Case):
        return "case"
    if isinstance(e, exp.Func | exp.Dot):
        start, end = e.meta.get("start"), e.meta.get("end")
        written = text[start:end + 1] if isinstance(start, int) and isinstance(end, int) \
            else e.sql("postgres")
        return written.split("(")[0].split(".")[-1].strip('" ').lower()
    return "?column?"


def _depth(text: str) -> int:
    """How deep parentheses nest in ``text`` (quotes aside: a bound, not a parse)."""
    depth = top = 0
    for m in _PARENS.finditer(_PARAMS.sub("''", text)):
        depth += 1 if m.group(0) == "(" else -1
        top = max(top, depth)
    return top


def parse(sql: str) -> exp.Expr:
    """One PostgreSQL statement, ``$n`` as markers, unnamed items named as PG would,
    keyword values (``current_timestamp``) as DuckDB's calls. Nesting deeper than
    ``MAX_DEPTH`` is TooComplex (54001), as PostgreSQL's stack depth limit."""
    text = _mark(sql)
    if _depth(text) > MAX_DEPTH:
        raise TooComplex(f"the statement nests more than {MAX_DEPTH} levels of parentheses")
    try:
        tree = sqlglot.parse_one(text, read="postgres")
    except (ParseError, TokenError) as exc:
        raise BadSql(f"syntax error: {str(exc).splitlines()[0]}") from None
    if isinstance(tree, exp.Select):
        items = [exp.alias_(e, name, quoted=True) if (name := _pg_name(e, text)) else e
                 for e in tree.expressions]
        tree.set("expressions", items)
    return tree.transform(lambda n: keyword_call(n) or n)


def _is_catalog(t: exp.Table) -> bool:
    return t.db.lower() in CATALOG_SCHEMAS or t.name.lower().startswith(("pg_", "duckdb_"))


def _tables(tree: exp.Expr, views: Mapping[str, ViewInfo]) -> list[exp.Table]:
    """The views ``tree`` reads (UnknownView for a table that is neither a view, a
    catalog table nor a CTE; BadSql if it mixes views and catalog tables)."""
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    read = [t for t in tree.find_all(exp.Table) if t.name and t.name not in ctes]
    catalog = [t for t in read if _is_catalog(t)]
    out = [t for t in read if not _is_catalog(t)]
    for t in out:
        if t.name not in views:
            raise UnknownView(f'relation "{t.name}" does not exist', view=t.name)
    if out and catalog:
        raise BadSql("a query reads either views or the catalog, not both")
    return out


def _strip_schema(node: exp.Expr) -> exp.Expr:
    """``public.balances`` -> ``balances``; ``"public"."balances"."account"`` ->
    ``balances.account`` (Metabase's column references)."""
    if isinstance(node, exp.Table) and node.db:
        return exp.Table(this=node.this.copy(), alias=node.args.get("alias"))
    if isinstance(node, exp.Column) and (node.args.get("db") or node.args.get("catalog")):
        node.set("db", None)
        node.set("catalog", None)
    return node


def _duck(tree: exp.Expr) -> str:
    return tree.sql("duckdb")


def _where(sel: exp.Select) -> list[exp.Expr]:
    w = sel.args.get("where")
    if w is None:
        return []
    if not isinstance(w.this, exp.And):
        return [w.this]
    return [c for c in w.this.flatten() if isinstance(c, exp.Expr)]


def _direct(sel: exp.Select, names: tuple[str, ...]) -> Direct | None:
    """The output columns when the select list is plain columns of ``names``."""
    if any(sel.args.get(k) for k in QUERY_TAIL):
        return None
    out: list[tuple[str, str]] = []
    for e in sel.expressions:
        if isinstance(e, exp.Star):
            out.extend((n, n) for n in names)
            continue
        col = e.this if isinstance(e, exp.Alias) else e
        if not isinstance(col, exp.Column) or col.name not in names:
            return None
        out.append((e.alias_or_name, col.name))
    return tuple(out)


def _agg_column(node: exp.Expr, view: ViewInfo, aggs: set[str]) -> exp.Expr:
    """An aggregate call -> the column of the pushed-down aggregate holding it; a
    column named with its table -> the groups' column."""
    if isinstance(node, exp.Column) and node.table:
        return exp.column(node.name, quoted=node.this.quoted)
    func = _AGGS.get(type(node))
    if func is None:
        if isinstance(node, exp.AggFunc):
            raise _NotPushable
        return node
    arg = node.this
    if node.args.get("distinct") or isinstance(arg, exp.Distinct):
        raise _NotPushable
    if isinstance(arg, exp.Star) and func == "count":
        name = "count(*)"
    elif not isinstance(arg, exp.Column) or arg.name not in view.names or (
            func in ("sum", "avg") and arg.name in view.key_columns):
        raise _NotPushable
    else:
        name = f"{func}({arg.name})"
    aggs.add(name)
    return exp.column(name, quoted=True)


def _aggregate(sel: exp.Select, view: ViewInfo, sql: str) -> Aggregate | None:
    group = sel.args.get("group")
    if sel.args.get("joins") or sel.args.get("distinct") or (
            group is None and not sel.find(exp.AggFunc)):
        return None
    gcols = [g for g in (group.expressions if group else [])]
    if any(not isinstance(g, exp.Column) or g.name not in view.names for g in gcols):
        return None
    conds = _where(sel)
    src, exact = key_source(view, conds)
    if conds and not (exact and isinstance(src, Scan) and src.bounds.prefix is not None):
        return None  # the aggregate filters by a key prefix only
    found: set[str] = set()
    try:
        post = sel.copy().transform(lambda n: _agg_column(n, view, found))
    except _NotPushable:
        return None
    assert isinstance(post, exp.Select)
    aggs = sorted(found)
    having = post.args.get("having")
    for k in ("where", "group", "having"):
        post.set(k, None)
    if having is not None:
        post.set("where", exp.Where(this=having.this))
    post.set("from_", exp.From(this=exp.to_table(AGG_TABLE)))
    names = tuple(g.name for g in gcols) + tuple(aggs)
    pushed = exp.select(*[g.name for g in gcols], *[
        exp.alias_(sqlglot.parse_one(a, read="duckdb"), a, quoted=True) for a in aggs]
    ).from_(view.name)
    if gcols:
        pushed = pushed.group_by(*[g.name for g in gcols])
    prefix = src.bounds.prefix if isinstance(src, Scan) else None
    return Aggregate(view.name, tuple(g.name for g in gcols), tuple(aggs), prefix,
                     _duck(post), _duck(pushed), sql, _direct(post, names))


def _limit(sel: exp.Select) -> int | None:
    """``LIMIT n`` when it is all the statement asks of the view's rows (no WHERE,
    ORDER BY, grouping, DISTINCT, window or aggregate): any n rows will do."""
    limit = sel.args.get("limit")
    value = limit.expression if isinstance(limit, exp.Limit) else None
    if not isinstance(value, exp.Literal) or value.is_string or sel.args.get("offset") \
            or any(sel.args.get(k) for k in ("where", *QUERY_TAIL) if k != "limit") \
            or sel.find(exp.AggFunc, exp.Window):
        return None
    return int(value.this) if str(value.this).isdigit() else None


def _single(sel: exp.Select, view: ViewInfo, sql: str) -> Plan:
    agg = _aggregate(sel, view, sql)
    if agg is not None:
        return agg
    conds = _where(sel)
    src, exact = key_source(view, conds)  # a read by key first: none is narrower
    if src is None:
        for rule in PUSHDOWNS:  # a query type's own pushdown (rules.py), the first that fits
            query = rule(sel, view)
            if query is not None:
                return Fetch(Pushed(query), sql)
    direct = _direct(sel, view.names) if exact or not conds else None
    return Fetch(src or Scan(view.name, limit=_limit(sel)), sql, direct)


def _reads_nothing(tree: exp.Expr) -> bool:
    """``LIMIT 0`` or a WHERE that is always false (Metabase's privilege probe ``WHERE
    1 <> 1 LIMIT 0``): the rows are none, only the columns matter."""
    if not isinstance(tree, exp.Select):
        return False
    limit = tree.args.get("limit")
    if isinstance(limit, exp.Limit) and isinstance(limit.expression, exp.Literal) \
            and str(limit.expression.this) == "0":
        return True
    where = tree.args.get("where")
    return where is not None and simplify(where.this.copy()) == exp.false()


def _gather(tree: exp.Expr, tables: list[exp.Table],
            views: Mapping[str, ViewInfo], sql: str) -> Gather:
    sources: list[Source] = []
    for name in dict.fromkeys(t.name for t in tables):
        uses = [t for t in tables if t.name == name]
        sel = uses[0].find_ancestor(exp.Select)
        src = None
        if len(uses) == 1 and sel is not None:
            alias = uses[0].alias_or_name
            alone = len(list(sel.find_all(exp.Table))) == 1
            mine = [c for c in _where(sel) if all(
                col.table == alias or (alone and not col.table)
                for col in c.find_all(exp.Column))]
            src, _ = key_source(views[name], mine)
        sources.append(src or Scan(name))
    return Gather(tuple(sources), sql)


def _reads_directly(sel: exp.Select) -> bool:
    """FROM its one view: no CTE, subquery, join or lateral between it and the rows."""
    source = sel.args.get("from_")
    return (source is not None and isinstance(source.this, exp.Table)
            and not any(sel.args.get(k) for k in ("with_", "joins", "laterals"))
            and not sel.find(exp.Subquery))


def plan(sql: str, views: Mapping[str, ViewInfo]) -> Plan:
    """``sql`` (one PostgreSQL statement) over ``views`` (the ones the session may
    read): BadSql for what does not parse or is not a query, UnknownView for a
    relation that is not there."""
    return prepare(sql, views)[0]


def prepare(sql: str, views: Mapping[str, ViewInfo]) -> tuple[Plan, tuple[int, ...]]:
    """``plan``, and the type oid of each parameter ``$n`` (``params.param_types``).
    A statement too deep for the parser's recursion is TooComplex (54001)."""
    try:
        return _prepare(sql, views)
    except RecursionError:
        raise TooComplex("the statement is nested too deeply to plan") from None


def _prepare(sql: str, views: Mapping[str, ViewInfo]) -> tuple[Plan, tuple[int, ...]]:
    tree = parse(sql)
    if not isinstance(tree, exp.Query | exp.Values):
        raise BadSql("only queries are answered here (SELECT, WITH, VALUES): the views "
                     "are read-only")
    tables = _tables(tree, views)
    if not tables:  # PostgreSQL still: the catalog rewrites it for its shims
        return CatalogQuery(tree.sql("postgres")), param_types(tree, {})
    if _reads_nothing(tree):  # over the catalog's empty tables shaped like the views
        types = param_types(tree, {t.alias_or_name: views[t.name] for t in tables})
        return CatalogQuery(tree.transform(_strip_schema).sql("postgres")), types
    tree = tree.transform(_strip_schema)
    types = param_types(tree, {t.alias_or_name: views[t.name] for t in tables})
    duck = _duck(tree)
    if isinstance(tree, exp.Select) and len(tables) == 1 and _reads_directly(tree):
        return _single(tree, views[tables[0].name], duck), types
    return _gather(tree, tables, views, duck), types
