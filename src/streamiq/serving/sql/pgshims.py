"""What DuckDB's own pg_catalog emulation lacks for psql, SQLAlchemy and Grafana.

Two parts, found by replaying the clients' captured catalog queries (spike 26,
``tests/unit/serving/sql/catalog_queries.sql``):

* ``SHIMS``: statements run once on a catalog database: PostgreSQL functions DuckDB
  does not have (as macros), and overlays (in the attached database ``pgx``, so they
  never show up as tables) of catalog tables that lack columns clients read;
* ``rewrite``: sqlglot transforms of a client's query: ``pg_catalog.f()`` -> ``f()``,
  ``COLLATE pg_catalog.default`` dropped, ``OPERATOR(pg_catalog.~)`` -> a regexp match,
  casts to ``regclass``/``regtype``/``regnamespace``, catalog tables -> their overlays.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

__all__ = ["OVERLAYS", "SERVER_VERSION", "SHIMS", "rewrite"]

SERVER_VERSION = "16.0"
SERVER_VERSION_NUM = "160000"
_FORMAT_TYPE = " ".join(f"WHEN {oid} THEN '{name}'" for oid, name in (
    (16, "boolean"), (17, "bytea"), (20, "bigint"), (21, "smallint"), (23, "integer"),
    (25, "text"), (1043, "character varying"), (700, "real"), (701, "double precision"),
    (1700, "numeric"), (1082, "date"), (1114, "timestamp without time zone"),
    (1184, "timestamp with time zone")))
_DATA_TYPES = " ".join(f"WHEN t = '{duck}' THEN '{pg}'" for duck, pg in (
    ("VARCHAR", "character varying"), ("DOUBLE", "double precision"), ("FLOAT", "real"),
    ("TIMESTAMP", "timestamp without time zone"), ("HUGEINT", "numeric"),
    ("TIMESTAMP WITH TIME ZONE", "timestamp with time zone"), ("BLOB", "bytea")))
#: information_schema views of this database only (not the overlays'), PG's type names
_INFORMATION = {"tables": "info_tables", "columns": "info_columns"}
_EMPTY = {  # catalog tables DuckDB lacks, empty here (no policies, publications...)
    "pg_policy": "oid BIGINT, polname VARCHAR, polrelid BIGINT, polcmd VARCHAR, "
                 "polpermissive BOOLEAN, polroles BIGINT[], polqual VARCHAR, polwithcheck VARCHAR",
    "pg_statistic_ext": "oid BIGINT, stxrelid BIGINT, stxname VARCHAR, stxnamespace BIGINT, "
                        "stxowner BIGINT, stxstattarget INTEGER, stxkeys INTEGER[], "
                        "stxkind VARCHAR[], stxexprs VARCHAR",
    "pg_publication": "oid BIGINT, pubname VARCHAR, puballtables BOOLEAN, pubviaroot BOOLEAN",
    "pg_publication_rel": "oid BIGINT, prpubid BIGINT, prrelid BIGINT, prqual VARCHAR, "
                          "prattrs INTEGER[]",
    "pg_publication_namespace": "oid BIGINT, pnpubid BIGINT, pnnspid BIGINT",
    "pg_roles": "oid BIGINT, rolname VARCHAR",
    "pg_collation": "oid BIGINT, collname VARCHAR, collnamespace BIGINT",
    "pg_inherits": "inhrelid BIGINT, inhparent BIGINT, inhseqno INTEGER, "
                   "inhdetachpending BOOLEAN",
    "pg_trigger": "oid BIGINT, tgrelid BIGINT, tgname VARCHAR, tgisinternal BOOLEAN, "
                  "tgenabled VARCHAR, tgparentid BIGINT",
    "pg_rewrite": "oid BIGINT, rulename VARCHAR, ev_class BIGINT, ev_type VARCHAR",
    "pg_opclass": "oid BIGINT, opcname VARCHAR, opcdefault BOOLEAN, opcmethod BIGINT, "
                  "opcnamespace BIGINT",
    "pg_sequence": "seqrelid BIGINT, seqstart BIGINT, seqincrement BIGINT, seqmax BIGINT, "
                   "seqmin BIGINT, seqcache BIGINT, seqcycle BOOLEAN",
}
SHIMS: tuple[str, ...] = (
    "ATTACH IF NOT EXISTS ':memory:' AS pgx",
    "CREATE OR REPLACE MACRO pg_get_userbyid(x) AS 'streamiq'",
    "CREATE OR REPLACE MACRO pg_encoding_to_char(x) AS 'UTF8'",
    "CREATE OR REPLACE MACRO to_regtype(x) AS "
    "(SELECT oid FROM pg_catalog.pg_type WHERE typname = x)",
    "CREATE OR REPLACE MACRO pg_get_indexdef(a, b, c) AS NULL",
    "CREATE OR REPLACE MACRO pg_get_serial_sequence(a, b) AS NULL",
    "CREATE OR REPLACE MACRO pg_get_statisticsobjdef_columns(a) AS NULL",
    "CREATE OR REPLACE MACRO pg_relation_is_publishable(a) AS false",
    "CREATE OR REPLACE MACRO pg_collation_is_visible(a) AS true",
    "CREATE OR REPLACE MACRO array_upper(a, d) AS len(a)",
    "CREATE OR REPLACE MACRO array_lower(a, d) AS 1",
    "CREATE OR REPLACE MACRO parse_ident(x) AS string_split(x, '.')",
    "CREATE OR REPLACE MACRO pg_table_size(x) AS 0",
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
    *(f"CREATE TABLE IF NOT EXISTS pgx.main.{t} ({cols})" for t, cols in _EMPTY.items()),
    "CREATE OR REPLACE VIEW pgx.main.pg_class AS SELECT * REPLACE (NULL::VARCHAR[] AS "
    "reloptions), false AS relforcerowsecurity FROM pg_catalog.pg_class",
    "CREATE OR REPLACE VIEW pgx.main.pg_database AS SELECT *, 10 AS datdba, 6 AS encoding, "
    "'C' AS datcollate, 'C' AS datctype, NULL AS daticulocale, 'c' AS datlocprovider, "
    "NULL::VARCHAR[] AS datacl FROM pg_catalog.pg_database WHERE datname = 'memory'",
    "CREATE OR REPLACE MACRO streamiq_data_type(t) AS CASE WHEN t LIKE 'DECIMAL%' "
    f"THEN 'numeric' {_DATA_TYPES} ELSE lower(t) END",
    "CREATE OR REPLACE VIEW pgx.main.info_tables AS SELECT * FROM information_schema.tables "
    "WHERE table_catalog = current_database()",
    "CREATE OR REPLACE VIEW pgx.main.info_columns AS SELECT * REPLACE "
    "(streamiq_data_type(data_type) AS data_type) FROM information_schema.columns "
    "WHERE table_catalog = current_database()",
    "CREATE OR REPLACE VIEW pgx.main.pg_index AS SELECT *, 0 AS indnullsnotdistinct "
    "FROM pg_catalog.pg_index",
)
OVERLAYS = frozenset({"pg_class", "pg_database", "pg_index", *_EMPTY})
_TABLE_FUNCTIONS = (exp.ExplodingGenerateSeries, exp.GenerateSeries, exp.Unnest, exp.Anonymous)
_OPS: dict[str, type[exp.Expr]] = {"~": exp.RegexpLike, "=": exp.EQ, "~~": exp.Like}
_TEXTISH = {"text": "text", "name": "text", "oid": "bigint", "char": "text", '"char"': "text",
            "int2": "int2", "int4": "int4", "int8": "int8", "bool": "bool"}


def _regclass(node: exp.Cast) -> exp.Expr:
    if isinstance(node.this, exp.Literal):
        name = str(node.this.name).replace("'", "''")
        return sqlglot.parse_one(f"(SELECT oid FROM pg_catalog.pg_class WHERE relname = '{name}')")
    inner: exp.Expr = node.this
    return inner


def _cast(node: exp.Cast) -> exp.Expr:
    to = node.to.sql("postgres").lower().removeprefix("pg_catalog.")
    if to == "regnamespace":
        return exp.Subquery(this=exp.select("nspname").from_("pg_catalog.pg_namespace").where(
            exp.EQ(this=exp.column("oid"), expression=node.this)))
    if to == "regtype":
        return exp.func("format_type", node.this, exp.null())
    if to == "regclass":
        return _regclass(node)
    if to in _TEXTISH:
        node.set("to", exp.DataType.build(_TEXTISH[to], dialect="postgres"))
    elif node.to.sql("postgres").lower().startswith("pg_catalog."):
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
    if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) \
            and node.this.name.lower() == "pg_catalog" and isinstance(node.expression, exp.Func):
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
