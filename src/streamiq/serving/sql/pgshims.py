"""What DuckDB's own pg_catalog emulation lacks for psql, pgjdbc (DBeaver, Metabase),
asyncpg, SQLAlchemy and Grafana.

Two parts, found by replaying the clients' captured catalog queries (spike 26,
``tests/unit/serving/sql/catalog_queries.sql``):

* ``SHIMS``: statements run once on a catalog database: PostgreSQL functions DuckDB
  does not have (as macros), and the overlays of catalog tables (``pgtables``);
* ``rewrite``: sqlglot transforms of a client's query: ``pg_catalog.f()`` -> ``f()``,
  ``COLLATE pg_catalog.default`` dropped, ``OPERATOR(pg_catalog.~)`` -> a regexp match,
  casts to ``regclass``/``regtype``/``regnamespace``, catalog tables -> their overlays.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from streamiq.serving.sql.pgtables import (
    AFTER_TABLES,
    DATABASE,
    OVERLAYS,
    SERVER_VERSION,
    SERVER_VERSION_NUM,
    TABLES,
)

__all__ = ["AFTER_TABLES", "OVERLAYS", "SERVER_VERSION", "SHIMS", "keyword_call", "rewrite"]

_INDEX_OID = 1_000_000  # pgtables': a view's primary key constraint's oid, less its index's
_FORMAT_TYPE = " ".join(f"WHEN {oid} THEN '{name}'" for oid, name in (
    (16, "boolean"), (17, "bytea"), (20, "bigint"), (21, "smallint"), (23, "integer"),
    (25, "text"), (1043, "character varying"), (700, "real"), (701, "double precision"),
    (1700, "numeric"), (1082, "date"), (1114, "timestamp without time zone"),
    (1184, "timestamp with time zone")))
#: information_schema views of this database only (not the overlays'), PG's type names
_INFORMATION = {"tables": "info_tables", "columns": "info_columns"}
SHIMS: tuple[str, ...] = (
    "ATTACH IF NOT EXISTS ':memory:' AS pgx",
    "CREATE OR REPLACE MACRO pg_get_userbyid(x) AS 'streamiq'",
    "CREATE OR REPLACE MACRO pg_encoding_to_char(x) AS 'UTF8'",
    "CREATE OR REPLACE MACRO pg_get_serial_sequence(a, b) AS NULL",
    "CREATE OR REPLACE MACRO pg_get_statisticsobjdef_columns(a) AS NULL",
    "CREATE OR REPLACE MACRO pg_relation_is_publishable(a) AS false",
    "CREATE OR REPLACE MACRO pg_collation_is_visible(a) AS true",
    "CREATE OR REPLACE MACRO array_upper(a, d) AS len(a)",
    "CREATE OR REPLACE MACRO array_lower(a, d) AS 1",
    "CREATE OR REPLACE MACRO parse_ident(x) AS string_split(x, '.')",
    "CREATE OR REPLACE MACRO pg_table_size(x) AS 0",
    "CREATE OR REPLACE MACRO pg_stat_get_numscans(x) AS 0",
    "CREATE OR REPLACE MACRO pg_database_size(x) AS 0",
    "CREATE OR REPLACE MACRO pg_relation_size(x) AS 0",
    "CREATE OR REPLACE MACRO pg_total_relation_size(x) AS 0",
    "CREATE OR REPLACE MACRO pg_is_in_recovery() AS false",
    "CREATE OR REPLACE MACRO streamiq_setting(x) AS CASE lower(x) WHEN 'search_path' THEN "
    "'public' WHEN 'default_table_access_method' THEN 'heap' WHEN 'server_version_num' THEN "
    f"'{SERVER_VERSION_NUM}' WHEN 'server_version' THEN '{SERVER_VERSION}' ELSE '' END",
    "CREATE OR REPLACE MACRO quote_ident(a) AS "
    "CASE WHEN regexp_full_match(a, '[a-z_][a-z0-9_]*') THEN a "
    "ELSE '\"' || replace(a, '\"', '\"\"') || '\"' END",
    f"CREATE OR REPLACE MACRO streamiq_format_type(o, m) AS CASE o {_FORMAT_TYPE} "
    "ELSE format_type(o, m) END",
    f"CREATE OR REPLACE MACRO streamiq_version() AS 'PostgreSQL {SERVER_VERSION} (streamiq)'",
    "CREATE OR REPLACE MACRO _pg_expandarray(a) AS unnest(list_transform(range(1, len(a) + 1), "
    "lambda i: {'x': a[i], 'n': i}))",
    *(f"CREATE OR REPLACE MACRO {f} AS NULL" for f in (
        "pg_get_function_result(a)", "pg_get_function_arguments(a)",
        "pg_get_function_identity_arguments(a)", "pg_get_triggerdef(a, b)",
        "pg_get_ruledef(a, b)", "pg_get_partkeydef(a)", "pg_get_statisticsobjdef(a)",
        "pg_get_function_sqlbody(a)")),
    "CREATE OR REPLACE MACRO pg_statistics_obj_is_visible(a) AS true",
    "CREATE OR REPLACE MACRO pg_backend_pid() AS 0",
    "CREATE OR REPLACE MACRO set_config(name, value, local) AS value",
    "CREATE OR REPLACE MACRO quote_literal(a) AS chr(39) || replace(a::VARCHAR, chr(39), "
    "chr(39) || chr(39)) || chr(39)",
    "CREATE OR REPLACE MACRO pg_tablespace_location(a) AS ''",
    *TABLES,
    "CREATE OR REPLACE MACRO to_regtype(x) AS "
    "(SELECT oid FROM pgx.main.pg_type WHERE typname = x)",
    "CREATE OR REPLACE MACRO pg_get_indexdef(ix, col, pretty) AS (SELECT CASE WHEN col = 0 "
    "THEN 'CREATE UNIQUE INDEX ' || k.conname || ' ON public.' || quote_ident(k.relname) "
    "|| ' USING btree (' || k.columns || ')' ELSE (SELECT a.attname FROM "
    "pg_catalog.pg_attribute a WHERE a.attrelid = k.relid AND a.attnum = k.attnums[col]) "
    "END FROM pgx.main.streamiq_pkeys k WHERE k.indexrelid = ix)",
    f"CREATE OR REPLACE MACRO streamiq_constraintdef(con) AS (SELECT 'PRIMARY KEY (' || "
    f"k.columns || ')' FROM pgx.main.streamiq_pkeys k WHERE k.indexrelid + {_INDEX_OID} = con)",
)
_TABLE_FUNCTIONS = (exp.ExplodingGenerateSeries, exp.GenerateSeries, exp.Unnest, exp.Anonymous)
_OPS: dict[str, type[exp.Expr]] = {"~": exp.RegexpLike, "=": exp.EQ, "~~": exp.Like}
_TEXTISH = {"text": "text", "name": "text", "oid": "bigint", "char": "text", '"char"': "text",
            "int2": "int2", "int4": "int4", "int8": "int8", "bool": "bool"}


#: SQL's keyword values as DuckDB calls: DuckDB resolves ``CURRENT_TIMESTAMP`` after
#: the select list's aliases, so ``SELECT current_timestamp AS "current_timestamp"``
#: (what PostgreSQL names it) would read the alias itself
_KEYWORDS: dict[type[exp.Expr], str] = {
    exp.CurrentTimestamp: "now", exp.CurrentDate: "current_date",
    exp.CurrentTime: "get_current_time", exp.Localtimestamp: "current_localtimestamp",
    exp.Localtime: "current_localtime"}
_USERS = (exp.CurrentUser, exp.SessionUser)


def keyword_call(node: exp.Expr) -> exp.Expr | None:
    """``node`` as a function call DuckDB resolves before aliases, or None."""
    name = _KEYWORDS.get(type(node))
    if name is not None and not node.args.get("this"):
        return exp.Anonymous(this=name)
    if isinstance(node, _USERS):
        return exp.Literal.string("streamiq")
    if isinstance(node, exp.CurrentCatalog | exp.CurrentDatabase):
        return exp.Literal.string(DATABASE)
    return None


def _regclass(node: exp.Cast) -> exp.Expr:
    if isinstance(node.this, exp.Literal):
        name = str(node.this.name).replace("'", "''")
        return sqlglot.parse_one(
            f"(SELECT min(oid) FROM pg_catalog.pg_class WHERE relname = '{name}')")
    inner: exp.Expr = node.this
    return inner


def _cast(node: exp.Cast) -> exp.Expr:
    to = node.to.sql("postgres").lower().replace('"', "").removeprefix("pg_catalog.")
    if to == "regnamespace":
        return exp.Subquery(this=exp.select("nspname").from_("pg_catalog.pg_namespace").where(
            exp.EQ(this=exp.column("oid"), expression=node.this)))
    if to == "regtype":
        return exp.func("format_type", node.this, exp.null())
    if to == "regclass":
        return _regclass(node)
    if to == "regproc":  # a function's name (pg_type's typinput...: NULL here)
        if isinstance(node.this, exp.Literal):
            return exp.Literal.string(str(node.this.name).removeprefix("pg_catalog."))
        return exp.cast(node.this, "VARCHAR")
    if to in _TEXTISH:
        node.set("to", exp.DataType.build(_TEXTISH[to], dialect="postgres"))
    elif node.to.sql("postgres").lower().replace('"', "").startswith("pg_catalog."):
        node.set("to", exp.DataType.build(to, dialect="postgres"))
    return node


def _operator(node: exp.Operator) -> exp.Expr:
    op = str(node.args["operator"]).split(".")[-1]
    rhs = node.expression.this if isinstance(node.expression, exp.Collate) else node.expression
    if op == "!~":
        return exp.Not(this=exp.RegexpLike(this=node.this, expression=rhs))
    return _OPS[op](this=node.this, expression=rhs)


def _function(node: exp.Anonymous) -> exp.Expr:
    name = str(node.name).lower()
    if name == "format_type":
        return exp.Anonymous(this="streamiq_format_type", expressions=node.expressions)
    if name == "json_build_object":
        return exp.Anonymous(this="json_object", expressions=node.expressions)
    if name == "current_setting":  # the few clients read; DuckDB's own fail on others
        return exp.Anonymous(this="streamiq_setting", expressions=node.expressions[:1])
    if name == "version":
        return exp.Anonymous(this="streamiq_version")
    if name == "pg_get_constraintdef":
        return exp.Anonymous(this="streamiq_constraintdef", expressions=node.expressions[:1])
    if name == "current_database":
        return exp.Literal.string(DATABASE)
    if name == "pg_get_expr" and len(node.expressions) > 2:
        return exp.Anonymous(this="pg_get_expr", expressions=node.expressions[:2])
    return node


def _from_function(node: exp.Table) -> exp.Expr:
    """``FROM pg_catalog.f(...) [AS] x``: a table function stays one (without the
    schema); a scalar one is, as in PostgreSQL, a one-row table of its value named x."""
    node.set("db", None)
    func, alias = node.this, node.alias
    if isinstance(func, _TABLE_FUNCTIONS) or not alias:
        return node
    row = exp.select(exp.alias_(func.copy(), alias)).subquery(alias)
    return row


def _fix(node: exp.Expr) -> exp.Expr:
    call = keyword_call(node)
    if call is not None:
        return call
    if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) \
            and node.this.name.lower() in ("pg_catalog", "information_schema") \
            and isinstance(node.expression, exp.Func):
        return _fix(node.expression)  # pg_catalog.version() -> version()
    if isinstance(node, exp.Cast):
        return _cast(node)
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Func):
        return _from_function(node)
    if isinstance(node, exp.Table) and node.db == "information_schema" \
            and node.name in _INFORMATION:
        return exp.table_(_INFORMATION[node.name], db="main", catalog="pgx",
                          alias=node.alias or node.name)
    if isinstance(node, exp.Table) and node.name in OVERLAYS and node.db in ("pg_catalog", ""):
        return exp.table_(node.name, db="main", catalog="pgx", alias=node.alias or node.name)
    if isinstance(node, exp.Column) and node.args.get("db") is not None:
        node.set("db", None)  # pg_catalog.pg_class.relname -> pg_class.relname
        return node
    if isinstance(node, exp.Anonymous):
        return _function(node)
    if isinstance(node, exp.CurrentVersion):
        return exp.Anonymous(this="streamiq_version")
    if isinstance(node, exp.Collate):
        inner: exp.Expr = node.this  # COLLATE pg_catalog.default
        return inner
    if isinstance(node, exp.Operator):
        return _operator(node)
    return node


def rewrite(sql: str) -> str:
    """A client's catalog query (PostgreSQL) as DuckDB runs it over the shims."""
    try:
        tree = sqlglot.parse_one(sql, read="postgres")
    except (ParseError, TokenError):
        return sql  # DuckDB will say what is wrong with it
    out = tree.sql("duckdb")
    for _ in range(5):  # transform does not revisit what it replaced: to a fixpoint
        tree = tree.transform(_fix)
        new = tree.sql("duckdb")
        if new == out:
            break
        out = new
    return out
