"""Every query shape of issue 26 planned: what is pushed to the owners, what DuckDB runs."""

from __future__ import annotations

from typing import Any

import pytest
from sqlviews import VIEWS

from streamiq.errors import BadSql, TooComplex, UnknownView
from streamiq.serving.query.topk import TopK
from streamiq.serving.sql.engine import Bounds
from streamiq.serving.sql.planner import MAX_TOP, plan, prepare
from streamiq.serving.sql.plans import (
    Aggregate,
    CatalogQuery,
    Fetch,
    Gather,
    Lookup,
    Plan,
    Pushed,
    Scan,
    bind,
    unbound_sql,
)

EVERY = Scan("order_counts")

SHAPES: list[tuple[str, Plan | dict[str, Any]]] = [
    # point lookups and multi-gets, answered without DuckDB (direct)
    ("SELECT account, balance FROM balances WHERE account = '1'",
     {"source": Lookup("balances", ("1",)), "direct": (("account", "account"),
                                                     ("balance", "balance"))}),
    ("SELECT * FROM balances WHERE account IN ('1', '2', '3')",
     {"source": Lookup("balances", ("1", "2", "3")), "direct": (
         ("account", "account"), ("balance", "balance"), ("count", "count"))}),
    ("SELECT count AS n FROM order_counts WHERE store = 's9' AND type IN ('GENERAL', 'X')",
     {"source": Lookup("order_counts", ("s9|GENERAL", "s9|X")), "direct": (("n", "count"),)}),
    # a key lookup with another condition: pushed, then filtered by DuckDB
    ("SELECT * FROM balances WHERE account = '1' AND balance > 3",
     {"source": Lookup("balances", ("1",)), "direct": None}),
    # prefix and range scans
    ("SELECT account FROM balances WHERE account LIKE '10%'",
     {"source": Scan("balances", Bounds(prefix="10")), "direct": (("account", "account"),)}),
    ("SELECT * FROM order_counts WHERE store LIKE 's1%'",
     {"source": Scan("order_counts", Bounds(prefix="s1")), "direct": (
         ("store", "store"), ("type", "type"), ("count", "count"), ("revenue", "revenue"))}),
    ("SELECT * FROM balances WHERE account LIKE '1_%'",  # not a plain prefix: every row
     {"source": Scan("balances"), "direct": None}),
    ("SELECT * FROM balances WHERE account BETWEEN 'a' AND 'b'",
     {"source": Scan("balances", Bounds(start="a", end="b}")), "direct": None}),
    ("SELECT * FROM order_counts WHERE store >= 's2' AND count > 1",
     {"source": Scan("order_counts", Bounds(start="s2")), "direct": None}),
    ("SELECT * FROM balances WHERE account < 'b'",
     {"source": Scan("balances", Bounds(end="b}")), "direct": None}),
    # both bounds of a range pushed, whatever their order
    ("SELECT * FROM balances WHERE account >= 'a' AND account < 'b'",
     {"source": Scan("balances", Bounds(start="a", end="b}")), "direct": None}),
    ("SELECT * FROM order_counts WHERE store <= 's5' AND count > 1 AND store > 's2'",
     {"source": Scan("order_counts", Bounds(start="s2", end="s5}")), "direct": None}),
    ("SELECT * FROM balances WHERE account BETWEEN 'a' AND 'c' AND account > 'b'",
     {"source": Scan("balances", Bounds(start="b", end="c}")), "direct": None}),
    ("SELECT * FROM balances WHERE account BETWEEN 'b' AND 'a'",
     {"source": Scan("balances", Bounds(start="b", end="a}")), "direct": None}),
    # DuckDB over every row: ORDER BY, LIMIT, expressions, window functions, DISTINCT aggs
    ("SELECT account, balance FROM balances ORDER BY balance DESC LIMIT 3",
     {"source": Pushed(TopK("balances", "balance", 3, "desc", nulls="first")), "direct": None}),
    ("SELECT account, balance FROM balances ORDER BY balance DESC LIMIT 3 OFFSET 2",
     {"source": Scan("balances"), "direct": None}),
    ("SELECT account, balance * 2 AS dbl, rank() OVER (ORDER BY balance) FROM balances",
     {"source": Scan("balances"), "direct": None}),
    ("SELECT type, count(DISTINCT store) FROM order_counts GROUP BY type",
     {"source": EVERY, "direct": None}),
    ("SELECT type, sum(count * 2) FROM order_counts GROUP BY type",
     {"source": EVERY, "direct": None}),
    ("SELECT type, count(*) FROM order_counts WHERE count > 1 GROUP BY type",
     {"source": EVERY, "direct": None}),
]

AGGREGATES: list[tuple[str, dict[str, Any]]] = [
    ("SELECT type, count(*), sum(count), avg(revenue) FROM order_counts GROUP BY type",
     {"group_by": ("type",), "aggs": ("avg(revenue)", "count(*)", "sum(count)"),
      "prefix": None, "direct": (("type", "type"), ("count", "count(*)"),
                                 ("sum", "sum(count)"), ("avg", "avg(revenue)"))}),
    ("SELECT type, sum(count) AS n FROM order_counts GROUP BY type HAVING sum(count) > 1 "
     "ORDER BY n DESC LIMIT 1",
     {"group_by": ("type",), "aggs": ("sum(count)",), "prefix": None, "direct": None,
      "post_sql": 'SELECT type, "sum(count)" AS n FROM __agg WHERE "sum(count)" > 1 '
                  "ORDER BY n DESC NULLS FIRST LIMIT 1"}),
    ("SELECT store, max(revenue) FROM order_counts WHERE store LIKE 's9%' GROUP BY store",
     {"group_by": ("store",), "aggs": ("max(revenue)",), "prefix": "s9",
      "direct": (("store", "store"), ("max", "max(revenue)"))}),
    ("SELECT count(*) FROM public.balances",
     {"group_by": (), "aggs": ("count(*)",), "prefix": None,
      "direct": (("count", "count(*)"),)}),
]


@pytest.mark.parametrize(("sql", "want"), SHAPES, ids=[s for s, _ in SHAPES])
def test_single_view_shapes(sql: str, want: dict[str, Any]) -> None:
    p = plan(sql, VIEWS)
    assert isinstance(p, Fetch)
    assert (p.source, p.direct) == (want["source"], want["direct"])


@pytest.mark.parametrize(("sql", "want"), AGGREGATES, ids=[s for s, _ in AGGREGATES])
def test_group_by_is_pushed_down(sql: str, want: dict[str, Any]) -> None:
    p = plan(sql, VIEWS)
    assert isinstance(p, Aggregate)
    assert {k: getattr(p, k) for k in want} == want


def test_a_join_pushes_each_views_own_key_filter() -> None:
    p = plan("SELECT b.account, o.count FROM balances b JOIN order_counts o "
             "ON o.store = b.account WHERE b.account = 's9'", VIEWS)
    assert isinstance(p, Gather)
    assert p.sources == (Lookup("balances", ("s9",)), EVERY)
    assert "JOIN order_counts AS o" in p.sql


def test_a_subquery_gathers_with_its_own_filter() -> None:
    p = plan("SELECT * FROM (SELECT account FROM balances WHERE account LIKE 'a%') x", VIEWS)
    assert isinstance(p, Gather) and p.sources == (Scan("balances", Bounds(prefix="a")),)


def test_a_cte_is_not_the_view_it_reads() -> None:
    p = plan("WITH big AS (SELECT * FROM balances WHERE balance > 2) SELECT count(*) FROM big",
             VIEWS)
    assert isinstance(p, Gather) and p.sources == (Scan("balances"),)


def test_postgres_semantics_survive_the_transpile() -> None:
    p = plan("SELECT account FROM balances ORDER BY balance DESC", VIEWS)
    assert isinstance(p, Fetch) and p.sql.endswith("ORDER BY balance DESC NULLS FIRST")


def test_unnamed_items_are_named_as_postgresql_names_them() -> None:
    p = plan("SELECT version(), 1, current_setting('x')", VIEWS)
    assert p == CatalogQuery('SELECT VERSION() AS "version", 1 AS "?column?", '
                             "CURRENT_SETTING('x') AS \"current_setting\"")


def test_catalog_queries_read_no_view() -> None:
    p = plan("SELECT relname FROM pg_catalog.pg_class", VIEWS)
    assert isinstance(p, CatalogQuery)
    assert isinstance(plan("VALUES (1, 'a')", VIEWS), CatalogQuery)
    with pytest.raises(BadSql, match="either views or the catalog"):
        plan("SELECT * FROM balances, pg_catalog.pg_class", VIEWS)


@pytest.mark.parametrize("sql", ["SELECT * FROM nope", "SELECT * FROM balances JOIN nope ON 1",
                                 "WITH x AS (SELECT 1) SELECT * FROM y"])
def test_an_unknown_view_is_42p01(sql: str) -> None:
    with pytest.raises(UnknownView, match=r'relation "(nope|y)" does not exist'):
        plan(sql, VIEWS)


def test_an_invisible_view_does_not_exist() -> None:
    with pytest.raises(UnknownView):
        plan("SELECT * FROM order_counts", {"balances": VIEWS["balances"]})


@pytest.mark.parametrize("sql", ["selec 1", "SELECT * FROM balances WHERE", "SELECT ((1"])
def test_syntax_errors_are_bad_sql(sql: str) -> None:
    with pytest.raises(BadSql, match="syntax error"):
        plan(sql, VIEWS)


@pytest.mark.parametrize("sql", ["DELETE FROM balances", "CREATE TABLE t (a int)"])
def test_views_are_read_only(sql: str) -> None:
    with pytest.raises(BadSql, match="read-only"):
        plan(sql, VIEWS)


def test_a_prepared_plan_serves_every_parameter_value() -> None:
    p = plan("SELECT balance FROM balances WHERE account = $1 AND balance > $2", VIEWS)
    many = plan("SELECT * FROM balances WHERE account IN ($1,$2) AND '$3' = '$3'", VIEWS)
    bound = bind(many, ["a", "b"])
    assert isinstance(bound, Fetch) and bound.source == Lookup("balances", ("a", "b"))
    one = bind(p, ["7", 3])
    two = bind(p, ["it's", None])
    assert isinstance(one, Fetch) and isinstance(two, Fetch)
    assert one.source == Lookup("balances", ("7",))
    assert one.sql.endswith("account = '7' AND balance > 3")
    assert two.sql.endswith("account = 'it''s' AND balance > NULL")
    assert unbound_sql(p.sql).endswith("account = NULL AND balance > NULL")
    with pytest.raises(IndexError):
        bind(p, ["7"])


def test_a_range_of_parameters_and_values_pushes_the_values_it_can_compare() -> None:
    """Bounds known only at Bind are never compared while planning: a value's bound is
    chosen over a parameter's, and a parameter's is kept when it is the only one."""
    p = plan("SELECT * FROM balances WHERE account < $1 AND account >= $2 "
             "AND account >= 'a'", VIEWS)
    bound = bind(p, ["c", "b"])
    assert isinstance(bound, Fetch)
    assert bound.source == Scan("balances", Bounds(start="a", end="c}"))


def test_any_of_an_array_is_a_multi_get() -> None:
    literal = plan("SELECT * FROM balances WHERE account = ANY(ARRAY['1', '2'])", VIEWS)
    assert isinstance(literal, Fetch) and literal.source == Lookup("balances", ("1", "2"))
    assert literal.direct is not None  # nothing left for DuckDB
    param = plan("SELECT count FROM order_counts WHERE store = ANY($1) AND type = $2", VIEWS)
    bound = bind(param, [["s1", "s2", None, "s1"], "GENERAL"])
    assert isinstance(bound, Fetch)
    assert bound.source == Lookup("order_counts", ("s1|GENERAL", "s2|GENERAL"))
    assert "store = ANY(['s1', 's2', NULL, 's1'])" in bound.sql


def test_schema_qualified_columns_are_the_views_columns() -> None:
    """Metabase names every column "public"."view"."column"."""
    p = plan('SELECT "public"."balances"."account" AS "account" FROM "public"."balances" '
             'WHERE "public"."balances"."account" = \'7\'', VIEWS)
    assert isinstance(p, Fetch) and p.source == Lookup("balances", ("7",))
    assert p.sql == 'SELECT "balances"."account" AS "account" FROM "balances" WHERE ' \
                    "\"balances\".\"account\" = '7'"


def test_limit_alone_asks_for_that_many_rows_and_limit_0_for_none() -> None:
    p = plan("SELECT t.* FROM public.balances t LIMIT 200", VIEWS)
    assert isinstance(p, Fetch) and p.source == Scan("balances", limit=200)
    # an ordered LIMIT needs every row, unless the owners' top-k holds them
    ordered = plan("SELECT * FROM balances ORDER BY account LIMIT 5", VIEWS)
    assert isinstance(ordered, Fetch) and ordered.source == Scan("balances")
    top = plan("SELECT * FROM balances ORDER BY balance LIMIT 5", VIEWS)
    assert isinstance(top, Fetch) and top.source == Pushed(TopK("balances", "balance", 5, "asc",
                                                                nulls="last"))
    for probe in ('SELECT TRUE AS "_" FROM "public"."balances" WHERE 1 <> 1 LIMIT 0',
                  "SELECT * FROM balances WHERE false", "SELECT * FROM balances LIMIT 0"):
        assert isinstance(plan(probe, VIEWS), CatalogQuery), probe  # the empty tables


def test_keyword_values_are_calls_and_named_as_written() -> None:
    p = plan("SELECT now(), current_timestamp, current_database(), current_catalog", VIEWS)
    assert p == CatalogQuery('SELECT NOW() AS "now", NOW() AS "current_timestamp", '
                             "'streamiq' AS \"current_database\", 'streamiq' AS "
                             '"current_catalog"')


def test_deep_nesting_is_54001_not_a_recursion_error() -> None:
    for depth in (33, 5000):
        with pytest.raises(TooComplex, match="more than 32 levels"):
            plan("SELECT " + "(" * depth + "1" + ")" * depth, VIEWS)
    assert isinstance(plan("SELECT " + "(" * 32 + "1" + ")" * 32, VIEWS), CatalogQuery)


@pytest.mark.parametrize(("sql", "types"), [
    ("SELECT * FROM balances WHERE account = $1 AND balance > $2 AND count < $3",
     (25, 1700, 20)),
    ("SELECT * FROM order_counts o WHERE o.revenue BETWEEN $1 AND $2 AND $3 = o.count",
     (701, 701, 20)),
    ("SELECT * FROM balances WHERE account = ANY($1) OR account IN ($2) LIMIT $3",
     (1009, 25, 20)),
    ("SELECT $1::int, CAST($2 AS numeric(10, 2)), $3::text[], $4", (23, 1700, 1009, 25)),
    ("SELECT oid FROM pg_class WHERE oid = any($1::oid[])", (1028,))])
def test_parameters_are_typed_by_what_they_are_compared_with(sql: str,
                                                             types: tuple[int, ...]) -> None:
    assert prepare(sql, VIEWS)[1] == types


def test_order_by_a_number_limit_k_is_the_owners_top_k() -> None:
    """``ORDER BY balance DESC LIMIT 10`` of one view, nothing else asked of its rows, is
    pushed down as a top-k (nulls first, as PostgreSQL orders DESC; last for ASC or when
    asked); DuckDB still runs the statement over those rows. Anything more (a WHERE, an
    OFFSET, an output column of that name, a text or key column, k past MAX_TOP) is not."""
    got = plan("SELECT account, balance FROM balances ORDER BY balance DESC LIMIT 10", VIEWS)
    assert isinstance(got, Fetch) and got.direct is None
    assert got.source == Pushed(TopK("balances", "balance", 10, "desc", nulls="first"))
    assert "ORDER BY balance DESC NULLS FIRST LIMIT 10" in got.sql
    asc = plan("SELECT * FROM balances ORDER BY balance LIMIT 3", VIEWS)
    assert isinstance(asc, Fetch) and asc.source == Pushed(TopK("balances", "balance", 3, "asc",
                                                                 nulls="last"))
    last = plan("SELECT * FROM balances ORDER BY count DESC NULLS LAST LIMIT 5", VIEWS)
    assert isinstance(last, Fetch) and last.source == Pushed(TopK("balances", "count", 5, "desc",
                                                                  nulls="last"))
    for sql in ("SELECT * FROM balances WHERE balance > 3 ORDER BY balance DESC LIMIT 3",
                "SELECT * FROM balances ORDER BY balance DESC LIMIT 3 OFFSET 1",
                "SELECT account, -balance AS balance FROM balances ORDER BY balance LIMIT 3",
                "SELECT * FROM balances ORDER BY account DESC LIMIT 3",
                "SELECT * FROM balances ORDER BY balance, count LIMIT 3",
                f"SELECT * FROM balances ORDER BY balance DESC LIMIT {MAX_TOP + 1}",
                "SELECT DISTINCT balance FROM balances ORDER BY balance DESC LIMIT 3"):
        p = plan(sql, VIEWS)
        assert not (isinstance(p, Fetch) and isinstance(p.source, Pushed)), sql


def test_a_planner_rule_pushes_its_query_type_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule (``sql/rules.py``) sees a one-view SELECT and returns its query: the plan
    is that query pushed down, DuckDB then running the statement over its rows; a rule
    that returns None leaves the statement to the next rule and the planner's own. A
    read by key comes first (none is narrower): no rule is asked then."""
    from sqlglot import exp

    from streamiq.serving.query.model import Query
    from streamiq.serving.sql import rules

    seen: list[str] = []

    def none(sel: exp.Select, view: Any) -> Query | None:
        seen.append(view.name)
        return None

    def where_only(sel: exp.Select, view: Any) -> Query | None:
        return TopK(view.name, "balance", 1) if rules.asks_only(sel, "where") and \
            sel.args.get("where") else None

    monkeypatch.setattr(rules, "PUSHDOWNS", [none, where_only, *rules.PUSHDOWNS])
    monkeypatch.setattr("streamiq.serving.sql.planner.PUSHDOWNS", rules.PUSHDOWNS)
    got = plan("SELECT account FROM balances WHERE balance > 3", VIEWS)
    assert isinstance(got, Fetch) and got.source == Pushed(TopK("balances", "balance", 1))
    assert "WHERE balance > 3" in got.sql and seen == ["balances"]
    keyed = plan("SELECT * FROM balances WHERE account = 'a' AND balance > 3", VIEWS)
    assert isinstance(keyed, Fetch) and keyed.source == Lookup("balances", ("a",))
    assert seen == ["balances"]
    top = plan("SELECT * FROM balances ORDER BY balance LIMIT 2", VIEWS)
    assert isinstance(top, Fetch) and isinstance(top.source, Pushed)  # top-k's, next
