"""pg_catalog's tables as clients read them, where DuckDB's own emulation falls short.

Each is an overlay in the attached database ``pgx`` (so it never shows up as a table of
the catalog): empty tables for what streamiq has none of (policies, extensions,
operators...), and views over DuckDB's tables that add what clients read: each view's
key columns as its primary key (pg_index, pg_constraint and the index in pg_class),
PostgreSQL's built-in types with their array types (pg_type), the pg_catalog and
information_schema namespaces, one role, numeric typmods as PostgreSQL encodes them,
the settings drivers ask for. ``pgshims`` rewrites a client's query to read them.
"""

from __future__ import annotations

__all__ = ["AFTER_TABLES", "DATABASE", "OVERLAYS", "SERVER_VERSION", "SERVER_VERSION_NUM",
           "TABLES", "key_row"]

SERVER_VERSION = "16.0"
SERVER_VERSION_NUM = "160000"
#: the database every session is in, whatever name it connected with
DATABASE = "streamiq"
#: a view's primary key index has its table's oid plus this; its constraint, plus twice
_INDEX_OID = 1_000_000
_PG_CATALOG_OID = 11
_HEAP = 2  # pg_am's heap: the access method of every view's table
_ROLE = 10

_EMPTY = {  # catalog tables DuckDB lacks, empty here (no policies, publications...)
    "pg_policy": "oid BIGINT, polname VARCHAR, polrelid BIGINT, polcmd VARCHAR, "
                 "polpermissive BOOLEAN, polroles BIGINT[], polqual VARCHAR, polwithcheck VARCHAR",
    "pg_statistic_ext": "oid BIGINT, stxrelid BIGINT, stxname VARCHAR, stxnamespace BIGINT, "
                        "stxowner BIGINT, stxstattarget INTEGER, stxkeys INTEGER[], "
                        "stxkind VARCHAR[], stxexprs VARCHAR",
    "pg_publication": "oid BIGINT, pubname VARCHAR, pubowner BIGINT, puballtables BOOLEAN, "
                      "pubinsert BOOLEAN, pubupdate BOOLEAN, pubdelete BOOLEAN, "
                      "pubtruncate BOOLEAN, pubviaroot BOOLEAN",
    "pg_publication_rel": "oid BIGINT, prpubid BIGINT, prrelid BIGINT, prqual VARCHAR, "
                          "prattrs INTEGER[]",
    "pg_publication_namespace": "oid BIGINT, pnpubid BIGINT, pnnspid BIGINT",
    "pg_collation": "oid BIGINT, collname VARCHAR, collnamespace BIGINT",
    "pg_inherits": "inhrelid BIGINT, inhparent BIGINT, inhseqno INTEGER, "
                   "inhdetachpending BOOLEAN",
    "pg_trigger": "oid BIGINT, tgrelid BIGINT, tgname VARCHAR, tgisinternal BOOLEAN, "
                  "tgenabled VARCHAR, tgparentid BIGINT, tgconstraint BIGINT",
    "pg_rewrite": "oid BIGINT, rulename VARCHAR, ev_class BIGINT, ev_type VARCHAR",
    "pg_opclass": "oid BIGINT, opcname VARCHAR, opcdefault BOOLEAN, opcmethod BIGINT, "
                  "opcnamespace BIGINT",
    "pg_cursors": "name VARCHAR, statement VARCHAR, is_holdable BOOLEAN, is_binary BOOLEAN, "
                  "is_scrollable BOOLEAN, creation_time TIMESTAMPTZ",
    "pg_range": "rngtypid BIGINT, rngsubtype BIGINT, rngmultitypid BIGINT, rngcollation BIGINT, "
                "rngsubopc BIGINT, rngcanonical VARCHAR, rngsubdiff VARCHAR",
    "pg_sequence": "seqrelid BIGINT, seqstart BIGINT, seqincrement BIGINT, seqmax BIGINT, "
                   "seqmin BIGINT, seqcache BIGINT, seqcycle BOOLEAN",
    "pg_auth_members": "oid BIGINT, roleid BIGINT, member BIGINT, grantor BIGINT, "
                       "admin_option BOOLEAN, inherit_option BOOLEAN, set_option BOOLEAN",
    "pg_extension": "oid BIGINT, extname VARCHAR, extowner BIGINT, extnamespace BIGINT, "
                    "extrelocatable BOOLEAN, extversion VARCHAR, extconfig BIGINT[], "
                    "extcondition VARCHAR[]",
    "pg_cast": "oid BIGINT, castsource BIGINT, casttarget BIGINT, castfunc BIGINT, "
               "castcontext VARCHAR, castmethod VARCHAR",
    "pg_operator": "oid BIGINT, oprname VARCHAR, oprnamespace BIGINT, oprowner BIGINT, "
                   "oprkind VARCHAR, oprcanmerge BOOLEAN, oprcanhash BOOLEAN, oprleft BIGINT, "
                   "oprright BIGINT, oprresult BIGINT, oprcom BIGINT, oprnegate BIGINT, "
                   "oprcode VARCHAR, oprrest VARCHAR, oprjoin VARCHAR",
    "pg_conversion": "oid BIGINT, conname VARCHAR, connamespace BIGINT, conowner BIGINT, "
                     "conforencoding INTEGER, contoencoding INTEGER, conproc VARCHAR, "
                     "condefault BOOLEAN",
    "pg_language": "oid BIGINT, lanname VARCHAR, lanowner BIGINT, lanispl BOOLEAN, "
                   "lanpltrusted BOOLEAN, lanplcallfoid BIGINT, laninline BIGINT, "
                   "lanvalidator BIGINT, lanacl VARCHAR[]",
    "pg_event_trigger": "oid BIGINT, evtname VARCHAR, evtevent VARCHAR, evtowner BIGINT, "
                        "evtfoid BIGINT, evtenabled VARCHAR, evttags VARCHAR[]",
    "pg_foreign_server": "oid BIGINT, srvname VARCHAR, srvowner BIGINT, srvfdw BIGINT, "
                         "srvtype VARCHAR, srvversion VARCHAR, srvacl VARCHAR[], "
                         "srvoptions VARCHAR[]",
    "pg_foreign_table": "ftrelid BIGINT, ftserver BIGINT, ftoptions VARCHAR[]",
    "pg_foreign_data_wrapper": "oid BIGINT, fdwname VARCHAR, fdwowner BIGINT, "
                               "fdwhandler BIGINT, fdwvalidator BIGINT, fdwacl VARCHAR[], "
                               "fdwoptions VARCHAR[]",
    "pg_opfamily": "oid BIGINT, opfmethod BIGINT, opfname VARCHAR, opfnamespace BIGINT, "
                   "opfowner BIGINT",
    "pg_shdescription": "objoid BIGINT, classoid BIGINT, description VARCHAR",
    "pg_matviews": "schemaname VARCHAR, matviewname VARCHAR, matviewowner VARCHAR, "
                   "tablespace VARCHAR, hasindexes BOOLEAN, ispopulated BOOLEAN, "
                   "definition VARCHAR",
    "pg_partitioned_table": "partrelid BIGINT, partstrat VARCHAR, partnatts INTEGER, "
                            "partdefid BIGINT, partattrs INTEGER[]",
    "pg_stat_activity": "datid BIGINT, datname VARCHAR, pid INTEGER, usename VARCHAR, "
                        "application_name VARCHAR, client_addr VARCHAR, state VARCHAR, "
                        "query VARCHAR, backend_start TIMESTAMPTZ, query_start TIMESTAMPTZ",
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
_TYPE_ROWS = ", ".join(
    f"({oid}, '{name}', {length}, '{cat}', 0, {array})"
    for oid, name, length, cat, array in _TYPES) + ", " + ", ".join(
    f"({array}, '_{name}', -1, 'A', {oid}, 0)" for oid, name, _, _, array in _TYPES if array)
_PG_TYPE = (
    "CREATE OR REPLACE VIEW pgx.main.pg_type AS SELECT oid::BIGINT AS oid, typname, "
    f"{_PG_CATALOG_OID}::BIGINT AS typnamespace, {_ROLE} AS typowner, typlen::SMALLINT AS "
    "typlen, typlen BETWEEN 1 AND 8 AS typbyval, 'b' AS typtype, typcategory, false AS "
    "typispreferred, true AS typisdefined, ',' AS typdelim, 0::BIGINT AS typrelid, CASE WHEN "
    "typelem = 0 THEN '-' ELSE 'array_subscript_handler' END AS typsubscript, "
    "typelem::BIGINT AS typelem, typarray::BIGINT AS typarray, CASE WHEN typelem = 0 THEN "
    "typname || 'in' ELSE 'array_in' END AS typinput, CASE WHEN typelem = 0 THEN typname || "
    "'out' ELSE 'array_out' END AS typoutput, typname || 'recv' AS typreceive, typname || "
    "'send' AS typsend, '-' AS typmodin, '-' AS typmodout, '-' AS typanalyze, 'i' AS "
    "typalign, 'p' AS typstorage, false AS typnotnull, 0::BIGINT AS typbasetype, -1 AS "
    "typtypmod, 0 AS typndims, 0::BIGINT AS typcollation, NULL::VARCHAR AS typdefaultbin, "
    "NULL::VARCHAR AS typdefault, NULL::VARCHAR[] AS typacl FROM (VALUES " + _TYPE_ROWS
    + ") AS t(oid, typname, typlen, typcategory, typelem, typarray)")
_KEYS = (
    "CREATE TABLE IF NOT EXISTS pgx.main.streamiq_keys (relname VARCHAR, attnums INTEGER[], "
    "names VARCHAR[])",
    "CREATE OR REPLACE VIEW pgx.main.streamiq_pkeys AS SELECT c.oid AS relid, c.oid + "
    f"{_INDEX_OID} AS indexrelid, c.relname || '_pkey' AS conname, c.relnamespace, "
    "c.relname, k.attnums, array_to_string(list_transform(k.names, lambda n: quote_ident(n)), "
    "', ') AS columns FROM pg_catalog.pg_class c JOIN pgx.main.streamiq_keys k ON c.relname "
    "= k.relname AND c.relkind = 'r' AND c.relnamespace = (SELECT min(oid) FROM "
    "pg_catalog.pg_namespace WHERE nspname = 'public')",
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
    f"{_INDEX_OID} AS oid, 2606 AS tableoid, conname, relnamespace AS connamespace, 'p' AS "
    "contype, false AS condeferrable, false AS condeferred, true AS convalidated, relid AS "
    "conrelid, 0 AS contypid, indexrelid AS conindid, 0 AS conparentid, 0 AS confrelid, ' ' "
    "AS confupdtype, ' ' AS confdeltype, ' ' AS confmatchtype, true AS conislocal, 0 AS "
    "coninhcount, true AS connoinherit, attnums AS conkey, NULL::INTEGER[] AS confkey, "
    "NULL::BIGINT[] AS conpfeqop, NULL::BIGINT[] AS conppeqop, NULL::BIGINT[] AS conffeqop, "
    "NULL::BIGINT[] AS conexclop, NULL::VARCHAR AS conbin FROM pgx.main.streamiq_pkeys",
)
#: relations of the overlay database itself, never shown
_OWN = ("(SELECT table_oid FROM duckdb_tables() WHERE database_name = 'pgx' UNION ALL "
        "SELECT view_oid FROM duckdb_views() WHERE database_name = 'pgx')")
_SETTINGS = (("max_index_keys", "32"), ("max_identifier_length", "63"),
             ("server_version", SERVER_VERSION), ("server_version_num", SERVER_VERSION_NUM),
             ("standard_conforming_strings", "on"), ("integer_datetimes", "on"),
             ("block_size", "8192"), ("search_path", "public"), ("TimeZone", "UTC"),
             ("DateStyle", "ISO, MDY"), ("client_encoding", "UTF8"),
             ("server_encoding", "UTF8"), ("default_transaction_read_only", "on"))
_VARLENA = "(17, 25, 1043, 1700)"
TABLES: tuple[str, ...] = (
    *(f"CREATE TABLE IF NOT EXISTS pgx.main.{t} ({cols}, tableoid BIGINT)"
      for t, cols in _EMPTY.items()),
    *_KEYS, _PG_TYPE,
    "CREATE OR REPLACE VIEW pgx.main.pg_class AS SELECT * REPLACE (NULL::VARCHAR[] AS "
    "reloptions, relhasindex OR oid IN (SELECT relid FROM pgx.main.streamiq_pkeys) AS "
    f"relhasindex, CASE WHEN relkind = 'r' THEN {_HEAP} ELSE relam END AS relam, 'd' AS "
    "relreplident), false AS relforcerowsecurity, 1259 AS tableoid FROM pg_catalog.pg_class "
    f"WHERE oid NOT IN {_OWN} UNION ALL "
    "SELECT c.* REPLACE (k.indexrelid AS oid, k.conname AS relname, 'i' AS relkind, 403 AS "
    "relam, NULL::VARCHAR[] AS reloptions, false AS relhasindex, 'n' AS relreplident), "
    "false, 1259 "
    "FROM pg_catalog.pg_class c JOIN pgx.main.streamiq_pkeys k ON c.oid = k.relid ORDER BY oid",
    f"CREATE OR REPLACE VIEW pgx.main.pg_database AS SELECT * REPLACE ('{DATABASE}' AS "
    f"datname), {_ROLE} AS datdba, 6 AS encoding, 'C' AS datcollate, 'C' AS datctype, NULL AS "
    "daticulocale, 'c' AS datlocprovider, NULL::VARCHAR[] AS datacl, true AS datallowconn, "
    "false AS datistemplate, -1 AS datconnlimit, 1663 AS dattablespace "
    "FROM pg_catalog.pg_database WHERE datname = 'memory'",
    f"CREATE OR REPLACE VIEW pgx.main.pg_roles AS SELECT {_ROLE}::BIGINT AS oid, 'streamiq' "
    "AS rolname, false AS rolsuper, true AS rolinherit, false AS rolcreaterole, false AS "
    "rolcreatedb, true AS rolcanlogin, false AS rolreplication, -1 AS rolconnlimit, "
    "'********' AS rolpassword, NULL::TIMESTAMPTZ AS rolvaliduntil, false AS rolbypassrls, "
    "NULL::VARCHAR[] AS rolconfig",
    "CREATE OR REPLACE VIEW pgx.main.pg_user AS SELECT rolname AS usename, oid AS usesysid, "
    "rolcreatedb AS usecreatedb, rolsuper AS usesuper, rolreplication AS userepl, "
    "rolbypassrls AS usebypassrls, rolpassword AS passwd, rolvaliduntil AS valuntil, "
    "rolconfig AS useconfig FROM pgx.main.pg_roles",
    "CREATE OR REPLACE VIEW pgx.main.pg_am AS SELECT * FROM (VALUES "
    f"({_HEAP}, 'heap', NULL, 't'), (403, 'btree', NULL, 'i')) AS am(oid, amname, amhandler, "
    "amtype)",
    "CREATE OR REPLACE VIEW pgx.main.pg_settings AS SELECT name, setting, NULL::VARCHAR AS "
    "unit, 'streamiq' AS category, short_desc, '' AS extra_desc, 'user' AS context, vartype, "
    "'default' AS source, NULL::VARCHAR AS min_val, NULL::VARCHAR AS max_val, "
    "NULL::VARCHAR[] AS enumvals, setting AS boot_val, setting AS reset_val, NULL::VARCHAR AS "
    "sourcefile, NULL::INTEGER AS sourceline, false AS pending_restart FROM (SELECT name, "
    "setting, short_desc, vartype FROM pg_catalog.pg_settings UNION ALL SELECT name, setting, "
    "'', 'string' FROM (VALUES " + ", ".join(f"('{k}', '{v}')" for k, v in _SETTINGS)
    + ") AS s(name, setting))",
    "CREATE OR REPLACE VIEW pgx.main.pg_attribute AS SELECT * REPLACE (CASE WHEN atttypid = "
    "1700 AND atttypmod >= 0 THEN (atttypmod // 1000) * 65536 + atttypmod % 1000 + 4 ELSE "
    f"atttypmod END AS atttypmod, CASE WHEN atttypid IN {_VARLENA} THEN 'x' ELSE 'p' END AS "
    f"attstorage, CASE WHEN atttypid IN {_VARLENA} THEN -1 ELSE 8 END AS attlen) FROM "
    "pg_catalog.pg_attribute",
    "CREATE OR REPLACE VIEW pgx.main.pg_tables AS SELECT * FROM pg_catalog.pg_tables WHERE "
    "schemaname = 'public'",
    "CREATE OR REPLACE VIEW pgx.main.pg_views AS SELECT * FROM pg_catalog.pg_views WHERE "
    "schemaname = 'public'",
    "CREATE OR REPLACE VIEW pgx.main.pg_indexes AS SELECT 'public' AS schemaname, relname AS "
    "tablename, conname AS indexname, NULL::VARCHAR AS tablespace, 'CREATE UNIQUE INDEX ' || "
    "conname || ' ON public.' || relname || ' USING btree (' || columns || ')' AS indexdef "
    "FROM pgx.main.streamiq_pkeys",
    "CREATE OR REPLACE MACRO streamiq_data_type(t) AS CASE WHEN t LIKE 'DECIMAL%' THEN "
    "'numeric' WHEN t = 'VARCHAR' THEN 'character varying' WHEN t = 'DOUBLE' THEN 'double "
    "precision' WHEN t = 'FLOAT' THEN 'real' WHEN t = 'TIMESTAMP' THEN 'timestamp without "
    "time zone' WHEN t = 'HUGEINT' THEN 'numeric' WHEN t = 'TIMESTAMP WITH TIME ZONE' THEN "
    "'timestamp with time zone' WHEN t = 'BLOB' THEN 'bytea' ELSE lower(t) END",
    "CREATE OR REPLACE VIEW pgx.main.info_tables AS SELECT * REPLACE "
    f"('{DATABASE}' AS table_catalog) FROM information_schema.tables "
    "WHERE table_catalog = current_database()",
    "CREATE OR REPLACE VIEW pgx.main.info_columns AS SELECT * REPLACE "
    f"('{DATABASE}' AS table_catalog, streamiq_data_type(data_type) AS data_type) FROM "
    "information_schema.columns WHERE table_catalog = current_database()",
)
#: the schemas: public (the views), pg_catalog and information_schema (DuckDB's own main
#: schema holds nothing here); made once the views' tables are (a table: fixed by then)
AFTER_TABLES = (
    "CREATE OR REPLACE TABLE pgx.main.pg_namespace AS SELECT * FROM pg_catalog.pg_namespace "
    f"WHERE nspname = 'public' UNION ALL SELECT {_PG_CATALOG_OID}, 'pg_catalog', {_ROLE}, NULL "
    f"UNION ALL SELECT 13, 'information_schema', {_ROLE}, NULL",)
#: catalog tables a client's query reads from ``pgx`` instead of DuckDB's pg_catalog
OVERLAYS = frozenset({"pg_class", "pg_database", "pg_index", "pg_constraint", "pg_am",
                      "pg_settings", "pg_attribute", "pg_type", "pg_namespace", "pg_roles",
                      "pg_user", "pg_tables", "pg_views", "pg_indexes", *_EMPTY})


def key_row(name: str, columns: tuple[str, ...], keys: tuple[str, ...]) -> str:
    """The statement recording a view's key columns as its primary key."""
    def quoted(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"
    nums = [columns.index(k) + 1 for k in keys]
    return (f"INSERT INTO pgx.main.streamiq_keys VALUES ({quoted(name)}, {nums}, "
            f"[{', '.join(map(quoted, keys))}])")
