// pgjdbc against a streamiq node, as DBeaver and Metabase use it: DatabaseMetaData, their
// own catalog queries, prepared statements past the driver's server-prepare threshold
// with binary transfer, parameters of every kind, a cursor read fetchSize rows at a time.
// Prints one "<check>\t<value>" line per check, or "<check>\tERROR <sqlstate> <message>".
// Run by tests/integration/test_sql_real_clients.py: java JdbcClient <port> <password>.
import java.math.BigDecimal;
import java.sql.*;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

public class JdbcClient {
    interface Check { String run() throws SQLException; }

    static void check(String name, Check c) {
        String out;
        try {
            out = c.run();
        } catch (SQLException e) {
            out = "ERROR " + e.getSQLState() + " " + e.getMessage().replace('\n', ' ');
        }
        System.out.println(name + "\t" + out);
    }

    /** A result set as "a,b;c,d" (its rows, columns by name when given). */
    static String rows(ResultSet rs, String... columns) throws SQLException {
        List<String> out = new ArrayList<>();
        int n = rs.getMetaData().getColumnCount();
        while (rs.next()) {
            List<String> row = new ArrayList<>();
            if (columns.length == 0) {
                for (int i = 1; i <= n; i++) row.add(String.valueOf(rs.getObject(i)));
            } else {
                for (String col : columns) row.add(String.valueOf(rs.getObject(col)));
            }
            out.add(String.join(",", row));
        }
        rs.close();
        return String.join(";", out);
    }

    static int count(ResultSet rs) throws SQLException {
        int n = 0;
        while (rs.next()) n++;
        rs.close();
        return n;
    }

    static String query(Connection c, String sql, Object... params) throws SQLException {
        try (PreparedStatement ps = c.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) ps.setObject(i + 1, params[i]);
            return rows(ps.executeQuery());
        }
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.setProperty("user", "jdbc");
        p.setProperty("password", args[1]);
        p.setProperty("sslmode", "disable");
        p.setProperty("binaryTransfer", "true");  // results in binary once server-prepared
        String url = "jdbc:postgresql://127.0.0.1:" + args[0] + "/streamiq";
        try (Connection c = DriverManager.getConnection(url, p)) {
            metadata(c);
            prepared(c);
            metabase(c);
            dbeaver(c);
            check("fetch_size", () -> {
                c.setAutoCommit(false);  // a portal read 5 rows at a time
                try (Statement s = c.createStatement()) {
                    s.setFetchSize(5);
                    return String.valueOf(count(s.executeQuery(
                        "SELECT account FROM balances ORDER BY account")));
                } finally {
                    c.commit();
                    c.setAutoCommit(true);
                }
            });
        }
    }

    static void metadata(Connection c) throws SQLException {
        DatabaseMetaData md = c.getMetaData();
        check("catalogs", () -> rows(md.getCatalogs()));
        check("schemas", () -> rows(md.getSchemas(), "TABLE_SCHEM"));
        check("tables", () -> rows(md.getTables(null, "public", "%", new String[]{"TABLE"}),
                                   "TABLE_NAME"));
        check("columns", () -> rows(md.getColumns(null, "public", "balances", "%"),
                                    "COLUMN_NAME", "TYPE_NAME", "NULLABLE"));
        check("primary_keys", () -> rows(md.getPrimaryKeys(null, "public", "order_counts"),
                                         "COLUMN_NAME", "KEY_SEQ", "PK_NAME"));
        check("index_info", () -> rows(md.getIndexInfo(null, "public", "order_counts", false,
                                                       true), "INDEX_NAME", "COLUMN_NAME"));
        check("imported_keys", () -> String.valueOf(count(md.getImportedKeys(null, "public",
                                                                             "balances"))));
        check("type_info", () -> {
            List<String> names = new ArrayList<>();
            ResultSet rs = md.getTypeInfo();
            while (rs.next()) names.add(rs.getString("TYPE_NAME"));
            return names.contains("numeric") && names.contains("int8") ? "numeric,int8" : "" + names;
        });
        check("functions", () -> String.valueOf(count(md.getFunctions(null, "public", "%"))));
        check("procedures", () -> String.valueOf(count(md.getProcedures(null, "public", "%"))));
    }

    static void prepared(Connection c) throws SQLException {
        // 7 executions: server-prepared from the 5th (prepareThreshold), results in binary
        check("lookup_binary", () -> {
            List<String> got = new ArrayList<>();
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT account, balance, count, to_timestamp(last_update / 1000) AS ts, "
                    + "CAST(to_timestamp(last_update / 1000) AS DATE) AS d, balance > 0 AS pos, "
                    + "count * 0.5 AS half FROM balances WHERE account = ?")) {
                for (int i = 0; i < 7; i++) {
                    ps.setString(1, "acc-00" + i);
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        BigDecimal balance = rs.getBigDecimal("balance");
                        got.add(rs.getString(1) + "," + balance + "," + rs.getLong(3) + ","
                                + rs.getTimestamp(4).getTime() / 1000 + "," + rs.getDate(5)
                                + "," + rs.getBoolean(6) + "," + rs.getDouble(7));
                    }
                }
            }
            return String.join(";", got);
        });
        check("big_decimal_param", () -> {  // numeric parameters, 7 times
            String last = "";
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT account FROM balances WHERE balance > ? ORDER BY account LIMIT 3")) {
                for (int i = 0; i < 7; i++) {
                    ps.setBigDecimal(1, new BigDecimal("390"));
                    last = rows(ps.executeQuery());
                }
            }
            return last;
        });
        check("any_array", () -> {
            try (PreparedStatement ps = c.prepareStatement(
                    "SELECT account, balance FROM balances WHERE account = ANY(?) ORDER BY 1")) {
                ps.setArray(1, c.createArrayOf("varchar", new String[]{"acc-001", "acc-002"}));
                return rows(ps.executeQuery());
            }
        });
        check("now", () -> query(c, "SELECT now() IS NOT NULL, current_database()"));
    }

    static void metabase(Connection c) throws SQLException {
        // Metabase's PostgreSQL driver: its connection setup and sync queries
        check("mb_timezone", () -> query(c, "show timezone;"));
        check("mb_set_timezone", () -> {
            try (Statement s = c.createStatement()) {
                s.execute("SET SESSION TIMEZONE TO 'UTC';");
                return "ok";
            }
        });
        check("mb_enums", () -> query(c, "SELECT nspname, typname FROM pg_type t JOIN "
            + "pg_namespace n ON n.oid = t.typnamespace WHERE t.oid IN (SELECT DISTINCT "
            + "enumtypid FROM pg_enum e)"));
        String privilege = "pg_catalog.has_table_privilege(current_user, '\"' || t.schemaname "
            + "|| '\"' || '.' || '\"' || t.objectname || '\"',  '%s') as %s";
        check("mb_privileges", () -> query(c, "with table_privileges as ( select NULL as role, "
            + "t.schemaname as schema, t.objectname as table, "
            + String.format(privilege, "update", "update") + ", "
            + String.format(privilege, "select", "select") + ", "
            + String.format(privilege, "insert", "insert") + ", "
            + String.format(privilege, "delete", "delete") + " from ( select schemaname, "
            + "tablename as objectname from pg_catalog.pg_tables union select schemaname, "
            + "viewname as objectname from pg_catalog.pg_views union select schemaname, "
            + "matviewname as objectname from pg_catalog.pg_matviews ) t where t.schemaname "
            + "!~ '^pg_' and t.schemaname <> 'information_schema' and "
            + "pg_catalog.has_schema_privilege(current_user, t.schemaname, 'usage') ) "
            + "select t.table, t.select from table_privileges t order by 1"));
        check("mb_probe", () -> String.valueOf(count(c.createStatement().executeQuery(
            "SELECT TRUE AS \"_\" FROM \"public\".\"balances\" WHERE 1 <> 1 LIMIT 0"))));
        check("mb_sample", () -> String.valueOf(count(c.createStatement().executeQuery(
            "SELECT \"public\".\"balances\".\"account\" AS \"account\", "
            + "\"public\".\"balances\".\"balance\" AS \"balance\" FROM \"public\".\"balances\" "
            + "LIMIT 10000"))));
        check("mb_field_values", () -> query(c, "SELECT \"public\".\"order_counts\".\"type\" AS "
            + "\"type\" FROM \"public\".\"order_counts\" GROUP BY "
            + "\"public\".\"order_counts\".\"type\" ORDER BY \"public\".\"order_counts\".\"type\" "
            + "ASC LIMIT 1000"));
    }

    static void dbeaver(Connection c) throws SQLException {
        // DBeaver's PostgreSQL plugin: what it reads to show the database navigator
        check("db_current", () -> query(c, "SELECT current_database()") + "|"
              + query(c, "SELECT current_schema(),session_user") + "|"
              + query(c, "SHOW search_path"));
        check("db_databases", () -> query(c, "SELECT db.oid,db.* FROM pg_catalog.pg_database db "
            + "WHERE 1 = 1 AND datallowconn AND NOT datistemplate OR db.datname =?\n"
            + "ORDER BY db.datname", "streamiq").split(",")[1]);
        String namespaces = "SELECT n.oid,n.*,d.description FROM pg_catalog.pg_namespace n\n"
            + "LEFT OUTER JOIN pg_catalog.pg_description d ON d.objoid=n.oid AND d.objsubid=0 "
            + "AND d.classoid='pg_namespace'::regclass\n ORDER BY nspname";
        check("db_schemas", () -> {
            List<String> names = new ArrayList<>();
            try (ResultSet rs = c.createStatement().executeQuery(namespaces)) {
                while (rs.next()) names.add(rs.getString("nspname"));
            }
            return String.join(",", names);
        });
        long ns = Long.parseLong(query(c, "SELECT oid FROM pg_catalog.pg_namespace "
                                          + "WHERE nspname = 'public'"));
        check("db_types", () -> String.valueOf(count(c.createStatement().executeQuery(
            "SELECT t.oid,t.*,c.relkind,format_type(nullif(t.typbasetype, 0), t.typtypmod) as "
            + "base_type_name, d.description\nFROM pg_catalog.pg_type t\nLEFT OUTER JOIN "
            + "pg_catalog.pg_type et ON et.oid=t.typelem \nLEFT OUTER JOIN pg_catalog.pg_class c "
            + "ON c.oid=t.typrelid\nLEFT OUTER JOIN pg_catalog.pg_description d ON "
            + "t.oid=d.objoid\nWHERE t.typname IS NOT NULL\nAND (c.relkind IS NULL OR c.relkind = "
            + "'c') AND (et.typcategory IS NULL OR et.typcategory <> 'C')")) > 0));
        check("db_roles", () -> query(c, "SELECT a.oid,a.*,pd.description FROM "
            + "pg_catalog.pg_roles a \nleft join pg_catalog.pg_shdescription pd on a.oid = "
            + "pd.objoid\nORDER BY a.rolname").split(",")[1]);
        check("db_tables", () -> {
            List<String> names = new ArrayList<>();
            try (PreparedStatement ps = c.prepareStatement("SELECT c.oid,c.*,d.description,"
                    + "pg_catalog.pg_get_expr(c.relpartbound, c.oid) as partition_expr,  "
                    + "pg_catalog.pg_get_partkeydef(c.oid) as partition_key \nFROM "
                    + "pg_catalog.pg_class c\nLEFT OUTER JOIN pg_catalog.pg_description d ON "
                    + "d.objoid=c.oid AND d.objsubid=0 AND d.classoid='pg_class'::regclass\n"
                    + "WHERE c.relnamespace=? AND c.relkind not in ('i','I','c')")) {
                ps.setLong(1, ns);
                ResultSet rs = ps.executeQuery();
                while (rs.next()) names.add(rs.getString("relname") + ":" + rs.getLong("oid"));
            }
            return String.join(",", names);
        });
        long table = Long.parseLong(query(c, "SELECT oid FROM pg_catalog.pg_class "
                                             + "WHERE relname = 'order_counts'"));
        check("db_columns", () -> {
            try (PreparedStatement ps = c.prepareStatement("SELECT c.relname,a.*,"
                    + "pg_catalog.pg_get_expr(ad.adbin, ad.adrelid, true) as def_value,"
                    + "dsc.description,dep.objid\nFROM pg_catalog.pg_attribute a\nINNER JOIN "
                    + "pg_catalog.pg_class c ON (a.attrelid=c.oid)\nLEFT OUTER JOIN "
                    + "pg_catalog.pg_attrdef ad ON (a.attrelid=ad.adrelid AND a.attnum = "
                    + "ad.adnum)\nLEFT OUTER JOIN pg_catalog.pg_description dsc ON "
                    + "(c.oid=dsc.objoid AND a.attnum = dsc.objsubid)\nLEFT OUTER JOIN pg_depend "
                    + "dep on dep.refobjid = a.attrelid AND dep.deptype = 'i' and "
                    + "dep.refobjsubid = a.attnum and dep.classid = dep.refclassid\nWHERE NOT "
                    + "a.attisdropped AND c.relkind not in ('i','I','c') AND c.oid=?\nORDER BY "
                    + "a.attnum")) {
                ps.setLong(1, table);
                return rows(ps.executeQuery(), "attname", "atttypid", "attnotnull");
            }
        });
        check("db_constraints", () -> {
            try (PreparedStatement ps = c.prepareStatement("SELECT c.oid,c.*,t.relname as "
                    + "tabrelname,rt.relnamespace as refnamespace,d.description, case when "
                    + "c.contype='c' then \"substring\"(pg_get_constraintdef(c.oid), 7) else null "
                    + "end consrc_copy\nFROM pg_catalog.pg_constraint c\nINNER JOIN "
                    + "pg_catalog.pg_class t ON t.oid=c.conrelid\nLEFT OUTER JOIN "
                    + "pg_catalog.pg_class rt ON rt.oid=c.confrelid\nLEFT OUTER JOIN "
                    + "pg_catalog.pg_description d ON d.objoid=c.oid AND d.objsubid=0 AND "
                    + "d.classoid='pg_constraint'::regclass\nWHERE c.conrelid=?\nORDER BY "
                    + "c.oid")) {
                ps.setLong(1, table);
                return rows(ps.executeQuery(), "conname", "contype", "conkey");
            }
        });
        check("db_indexes", () -> {
            List<String> got = new ArrayList<>();
            try (PreparedStatement ps = c.prepareStatement("SELECT i.*,i.indkey as keys,"
                    + "c.relname,c.relnamespace,c.relam,c.reltablespace,tc.relname as tabrelname,"
                    + "dsc.description,pg_catalog.pg_get_expr(i.indpred, i.indrelid) as "
                    + "pred_expr,pg_catalog.pg_get_expr(i.indexprs, i.indrelid, true) as expr,"
                    + "pg_catalog.pg_relation_size(i.indexrelid) as index_rel_size,"
                    + "pg_catalog.pg_stat_get_numscans(i.indexrelid) as index_num_scans\nFROM "
                    + "pg_catalog.pg_index i\nINNER JOIN pg_catalog.pg_class c ON "
                    + "c.oid=i.indexrelid\nINNER JOIN pg_catalog.pg_class tc ON "
                    + "tc.oid=i.indrelid\nLEFT OUTER JOIN pg_catalog.pg_description dsc ON "
                    + "i.indexrelid=dsc.objoid\nWHERE  i.indrelid=? ORDER BY c.relname")) {
                ps.setLong(1, table);
                ResultSet rs = ps.executeQuery();
                while (rs.next()) {
                    got.add(rs.getString("relname") + ":" + rs.getBoolean("indisprimary"));
                    try (PreparedStatement def = c.prepareStatement(
                            "select pg_catalog.pg_get_indexdef(?, ?, true)")) {
                        for (int col = 1; col <= 2; col++) {
                            def.setLong(1, rs.getLong("indexrelid"));
                            def.setInt(2, col);
                            got.add(rows(def.executeQuery()));
                        }
                    }
                }
            }
            return String.join(",", got);
        });
        check("db_data", () -> String.valueOf(count(c.createStatement().executeQuery(
            "SELECT t.* FROM public.balances t\nLIMIT 200"))));
    }
}
