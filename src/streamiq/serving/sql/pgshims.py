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

__all__ = ["AFTER_TABLES", "OVERLAYS", "SERVER_VERSION", "SHIMS", "keyword_call", "rewrite"]

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
    "pg_cursors": "name VARCHAR, statement VARCHAR, is_holdable BOOLEAN, is_binary BOOLEAN, "
                  "is_scrollable BOOLEAN, creation_time TIMESTAMPTZ",
    "pg_range": "rngtypid BIGINT, rngsubtype BIGINT, rngmultitypid BIGINT, rngcollation BIGINT, "
                "rngsubopc BIGINT, rngcanonical VARCHAR, rngsubdiff VARCHAR",
    "pg_sequence": "seqrelid BIGINT, seqstart BIGINT, seqincrement BIGINT, seqmax BIGINT, "
                   "seqmin BIGINT, seqcache BIGINT, seqcycle BOOLEAN",
}
#: PostgreSQL's built-in types clients look up (asyncpg's type introspection, pgjdbc's
#: getTypeInfo, SQLAlchemy's reflection): (oid, name, length, category, array's oid)
_TYPES = ((16, "bool", 1, "B", 1000), (17, "bytea", -1, "U", 1001), (18, "char", 1, "Z", 1002),
          (19, "name", 64, "S", 1003), (20, "int8", 8, "N", 1016), (21, "int2", 2, "N", 1005),
          (22, "int2vector", -1, "A", 1006), (23, "int4", 4, "N", 1007),
          (24, "regproc", 4, "N", 1008), (25, "text", -1, "S", 1009), (26, "oid", 4, "N", 1028),
          (114, "json", -1, "U", 199), (700, "float4", 4, "N", 1021),
          (701, "float8", 8, "N", 1022), (705, "unknown", -2, "X", 0),
          (1042, "bpchar", -1, "S", 1014), (1043, "varchar", -1, "S", 1015),
          (1082, "date", 4, "D", 1182), (1083, "time", 8, "D", 1183),
          (1114, "timestamp", 8, "D", 1115), (1184, "timestamptz", 8, "D", 1185),
          (1186, "interval", 16, "T", 1187), (1700, "numeric", -1, "N", 1231),
          (2205, "regclass", 4, "N", 2210), (2206, "regtype", 4, "N", 2211),
          (2249, "record", -1, "P", 2287), (2278, "void", 4, "P", 0),
          (2950, "uuid", 16, "U", 2951), (3802, "jsonb", -1, "U", 3807))
_PG_CATALOG_OID = 11
_TYPE_ROWS = ", ".join(
    f"({oid}, '{name}', {length}, '{cat}', 0, {array}, 'b')"
    for oid, name, length, cat, array in _TYPES) + ", " + ", ".join(
    f"({array}, '_{name}', -1, 'A', {oid}, 0, 'b')"
    for oid, name, _, _, array in _TYPES if array)
#: pg_type as PostgreSQL has it (DuckDB's lacks array types and namespaces them in main)
_PG_TYPE = (
    "CREATE OR REPLACE VIEW pgx.main.pg_type AS SELECT oid::BIGINT AS oid, typname, "
    f"{_PG_CATALOG_OID}::BIGINT AS typnamespace, 10 AS typowner, typlen::SMALLINT AS typlen, "
    "typlen BETWEEN 1 AND 8 AS typbyval, typtype, typcategory, false AS typispreferred, true "
    "AS typisdefined, ',' AS typdelim, 0::BIGINT AS typrelid, CASE WHEN typelem = 0 THEN '-' "
    "ELSE 'array_subscript_handler' END AS typsubscript, typelem::BIGINT AS typelem, "
    "typarray::BIGINT AS typarray, CASE WHEN typelem = 0 THEN typname || 'in' ELSE 'array_in' "
    "END AS typinput, CASE WHEN typelem = 0 THEN typname || 'out' ELSE 'array_out' END AS "
    "typoutput, typname || 'recv' AS typreceive, typname || 'send' AS typsend, '-' AS "
    "typmodin, '-' AS typmodout, '-' AS typanalyze, 'i' AS typalign, 'p' AS typstorage, "
    "false AS typnotnull, 0::BIGINT AS typbasetype, -1 AS typtypmod, 0 AS typndims, "
    "0::BIGINT AS typcollation, NULL::VARCHAR AS typdefaultbin, NULL::VARCHAR AS typdefault, "
    "NULL::VARCHAR[] AS typacl FROM (VALUES " + _TYPE_ROWS + ") AS t(oid, typname, typlen, "
    "typcategory, typelem, typarray, typtype)")
#: the schemas: public (the views), pg_catalog and information_schema (DuckDB's own main
#: schema holds nothing here)
_PG_NAMESPACE = (
    "CREATE OR REPLACE TABLE pgx.main.pg_namespace AS SELECT * FROM pg_catalog.pg_namespace "
    f"WHERE nspname = 'public' UNION ALL SELECT {_PG_CATALOG_OID}, 'pg_catalog', 10, NULL "
    "UNION ALL SELECT 13, 'information_schema', 10, NULL")
#: a view's primary key index (its key columns, ``<view>_pkey``) has its table's oid plus this
_INDEX_OID = 1_000_000
#: pg_index and pg_constraint: each view's key columns as its primary key
_KEYS = (
    "CREATE OR REPLACE VIEW pgx.main.pg_index AS SELECT indexrelid, relid AS indrelid, "
    "len(attnums)::INTEGER AS indnatts, len(attnums)::INTEGER AS indnkeyatts, true AS "
    "indisunique, false AS indnullsnotdistinct, true AS indisprimary, false AS indisexclusion, "
    "true AS indimmediate, false AS indisclustered, true AS indisvalid, false AS indcheckxmin, "
    "true AS indisready, true AS indislive, false AS indisreplident, attnums AS indkey, "
    "list_transform(attnums, lambda x: 100)::BIGINT[] AS indcollation, "
    "list_transform(attnums, lambda x: 0)::BIGINT[] AS indclass, "
    "list_transform(attnums, lambda x: 0)::INTEGER[] AS indoption, NULL::VARCHAR AS indexprs, "
    "NULL::VARCHAR AS indpred FROM pgx.main.streamiq_pkeys",
    "CREATE OR REPLACE VIEW pgx.main.pg_constraint AS SELECT indexrelid + "
    f"{_INDEX_OID} AS oid, conname, relnamespace AS connamespace, 'p' AS contype, false AS "
    "condeferrable, false AS condeferred, true AS convalidated, relid AS conrelid, 0 AS "
    "contypid, indexrelid AS conindid, 0 AS conparentid, 0 AS confrelid, ' ' AS confupdtype, "
    "' ' AS confdeltype, ' ' AS confmatchtype, true AS conislocal, 0 AS coninhcount, true AS "
    "connoinherit, attnums AS conkey, NULL::INTEGER[] AS confkey, NULL::BIGINT[] AS conpfeqop, "
    "NULL::BIGINT[] AS conppeqop, NULL::BIGINT[] AS conffeqop, NULL::BIGINT[] AS conexclop, "
    "NULL::VARCHAR AS conbin FROM pgx.main.streamiq_pkeys",
)
SHIMS: tuple[str, ...] = (
    "ATTACH IF NOT EXISTS ':memory:' AS pgx",
    "CREATE OR REPLACE MACRO pg_get_userbyid(x) AS 'streamiq'",
    "CREATE OR REPLACE MACRO pg_encoding_to_char(x) AS 'UTF8'",
    "CREATE OR REPLACE MACRO to_regtype(x) AS "
    "(SELECT oid FROM pg_catalog.pg_type WHERE typname = x)",
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
    "CREATE TABLE IF NOT EXISTS pgx.main.streamiq_keys (relname VARCHAR, attnums INTEGER[])",
    "CREATE OR REPLACE VIEW pgx.main.streamiq_pkeys AS SELECT c.oid AS relid, c.oid + "
    f"{_INDEX_OID} AS indexrelid, c.relname || '_pkey' AS conname, c.relnamespace, k.attnums "
    "FROM pg_catalog.pg_class c JOIN pgx.main.streamiq_keys k ON c.relname = k.relname "
    "AND c.relkind = 'r' AND c.relnamespace = (SELECT min(oid) FROM pg_catalog.pg_namespace "
    "WHERE nspname = 'public')",
    "CREATE OR REPLACE VIEW pgx.main.pg_class AS SELECT * REPLACE (NULL::VARCHAR[] AS "
    "reloptions, relhasindex OR oid IN (SELECT relid FROM pgx.main.streamiq_pkeys) AS "
    "relhasindex), false AS relforcerowsecurity FROM pg_catalog.pg_class UNION ALL "
    "SELECT c.* REPLACE (k.indexrelid AS oid, k.conname AS relname, 'i' AS relkind, 403 AS "
    "relam, NULL::VARCHAR[] AS reloptions, false AS relhasindex), false "
    "FROM pg_catalog.pg_class c JOIN pgx.main.streamiq_pkeys k ON c.oid = k.relid ORDER BY oid",
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
    *_KEYS, _PG_TYPE,
    "CREATE OR REPLACE MACRO pg_get_indexdef(ix, col, pretty) AS CASE WHEN col = 0 THEN NULL "
    "ELSE (SELECT min(a.attname) FROM pgx.main.pg_index i JOIN pg_catalog.pg_attribute a ON "
    "a.attrelid = i.indrelid AND a.attnum = i.indkey[col] WHERE i.indexrelid = ix) END",
    "CREATE OR REPLACE MACRO _pg_expandarray(a) AS unnest(list_transform(range(1, len(a) + 1), "
    "lambda i: {'x': a[i], 'n': i}))",
    *(f"CREATE OR REPLACE MACRO {f} AS NULL" for f in (
        "pg_get_function_result(a)", "pg_get_function_arguments(a)",
        "pg_get_function_identity_arguments(a)", "pg_get_triggerdef(a, b)",
        "pg_get_ruledef(a, b)", "pg_get_partkeydef(a)", "pg_get_statisticsobjdef(a)")),
    "CREATE OR REPLACE MACRO pg_backend_pid() AS 0",
    "CREATE OR REPLACE MACRO set_config(name, value, local) AS value",
    "CREATE OR REPLACE MACRO quote_literal(a) AS chr(39) || replace(a::VARCHAR, chr(39), "
    "chr(39) || chr(39)) || chr(39)",
    "CREATE OR REPLACE MACRO pg_tablespace_location(a) AS ''",
    "CREATE OR REPLACE VIEW pgx.main.pg_am AS SELECT * FROM pg_catalog.pg_am "
    "UNION ALL SELECT 403, 'btree', NULL, 'i'",
    "CREATE OR REPLACE VIEW pgx.main.pg_settings AS SELECT name, setting, short_desc, vartype, "
    "NULL::VARCHAR AS unit FROM pg_catalog.pg_settings UNION ALL SELECT name, setting, '', "
    "'string', NULL FROM (VALUES " + ", ".join(f"('{k}', '{v}')" for k, v in (
        ("max_index_keys", "32"), ("max_identifier_length", "63"),
        ("server_version", SERVER_VERSION), ("server_version_num", SERVER_VERSION_NUM),
        ("standard_conforming_strings", "on"), ("integer_datetimes", "on"),
        ("block_size", "8192"))) + ") AS s(name, setting)",
    "CREATE OR REPLACE VIEW pgx.main.pg_attribute AS SELECT * REPLACE (CASE WHEN atttypid = "
    "1700 AND atttypmod >= 0 THEN (atttypmod // 1000) * 65536 + atttypmod % 1000 + 4 ELSE "
    "atttypmod END AS atttypmod) FROM pg_catalog.pg_attribute",
)
#: run once the views' tables are made (a table: the schemas are fixed by then)
AFTER_TABLES = (_PG_NAMESPACE,)
OVERLAYS = frozenset({"pg_class", "pg_database", "pg_index", "pg_constraint", "pg_am",
                      "pg_settings", "pg_attribute", "pg_type", "pg_namespace", *_EMPTY})
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
    exp.Localtime: "current_localtime", exp.CurrentCatalog: "current_database"}
_USERS = (exp.CurrentUser, exp.SessionUser)


def keyword_call(node: exp.Expr) -> exp.Expr | None:
    """``node`` as a function call DuckDB resolves before aliases, or None."""
    name = _KEYWORDS.get(type(node))
    if name is not None and not node.args.get("this"):
        return exp.Anonymous(this=name)
    if isinstance(node, _USERS):
        return exp.Literal.string("streamiq")
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
