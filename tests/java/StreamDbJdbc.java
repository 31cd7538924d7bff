import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.Date;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;

/**
 * Drives a StreamDB server with pgjdbc the way an application and a BI tool do: DDL, inserts
 * (plain and a PreparedStatement batch), a parameterized read of a materialized view, and the
 * DatabaseMetaData calls tools make first. Prints one line per fact, "label|value|value...",
 * which tests/test_e2e_jdbc.py checks. Usage: java StreamDbJdbc jdbc-url name-suffix
 */
public final class StreamDbJdbc {
    private StreamDbJdbc() {
    }

    private static void emit(String label, Object... values) {
        StringBuilder line = new StringBuilder(label);
        for (Object value : values) {
            line.append('|').append(value);
        }
        System.out.println(line);
    }

    public static void main(String[] args) throws SQLException {
        String url = args[0];
        String suffix = args[1];
        String clicks = "jclicks_" + suffix;
        String users = "jusers_" + suffix;
        String perUser = "jper_user_" + suffix;
        String slow = "jslow_" + suffix;

        Properties props = new Properties();
        props.setProperty("user", "streamdb");
        props.setProperty("ApplicationName", "streamdb-jdbc-test");
        try (Connection conn = DriverManager.getConnection(url, props)) {
            DatabaseMetaData meta = conn.getMetaData();
            emit("product", meta.getDatabaseProductName(), meta.getDatabaseProductVersion());

            try (Statement st = conn.createStatement()) {
                st.execute("CREATE STREAM " + clicks + " (user_id TEXT KEY, page TEXT, ms INT)");
                st.execute("CREATE TABLE " + users + " (id INT PRIMARY KEY, name TEXT, plan TEXT)");
                st.execute("CREATE MATERIALIZED VIEW " + perUser + " AS SELECT user_id, count(*) AS views, "
                        + "sum(ms) AS total_ms FROM " + clicks + " GROUP BY user_id");
                st.execute("CREATE STREAM " + slow + " AS SELECT user_id, page FROM " + clicks + " WHERE ms > 200");
                emit("ddl", "ok");
                int inserted = st.executeUpdate("INSERT INTO " + users
                        + " VALUES (1, 'ann', 'free'), (2, 'bob', 'pro'), (3, 'cid', 'pro')");
                emit("insert", inserted);
                emit("update", st.executeUpdate("UPDATE " + users + " SET plan = 'team' WHERE id = 3"));
            }

            try (PreparedStatement ps = conn.prepareStatement(
                    "INSERT INTO " + clicks + " (user_id, page, ms) VALUES (?, ?, ?)")) {
                Object[][] rows = {{"ann", "/home", 120}, {"bob", "/cart", 340}, {"ann", "/cart", 95},
                    {"ann", "/pay", 410}, {"cid", "/home", 7}};
                for (Object[] row : rows) {
                    ps.setString(1, (String) row[0]);
                    ps.setString(2, (String) row[1]);
                    ps.setInt(3, (Integer) row[2]);
                    ps.addBatch();
                }
                emit("batch", Arrays.toString(ps.executeBatch()));
            }

            try (Statement st = conn.createStatement()) {
                st.execute("FLUSH");
            }

            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT user_id, views, total_ms FROM " + perUser + " WHERE views >= ? ORDER BY user_id")) {
                for (int minViews : new int[] {1, 2}) {
                    ps.setLong(1, minViews);
                    try (ResultSet rs = ps.executeQuery()) {
                        if (minViews == 1) {
                            ResultSetMetaData rmd = rs.getMetaData();
                            for (int i = 1; i <= rmd.getColumnCount(); i++) {
                                emit("result_column", rmd.getColumnLabel(i), rmd.getColumnTypeName(i),
                                        rmd.getColumnClassName(i));
                            }
                        }
                        while (rs.next()) {
                            emit("view_row", minViews, rs.getString(1), rs.getLong(2), rs.getLong(3));
                        }
                    }
                }
            }

            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT id, name, plan FROM " + users + " WHERE plan <> ? ORDER BY id")) {
                ps.setString(1, "free");
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) {
                        emit("user_row", rs.getInt("id"), rs.getString("name"), rs.getString("plan"));
                    }
                }
            }
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT user_id, page FROM " + slow + " WHERE user_id = ? ORDER BY page")) {
                ps.setString(1, "ann");
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) {
                        emit("slow_row", rs.getString(1), rs.getString(2));
                    }
                }
            }

            try (ResultSet rs = meta.getSchemas()) {
                while (rs.next()) {
                    emit("schema", rs.getString("TABLE_SCHEM"));
                }
            }
            try (ResultSet rs = meta.getTableTypes()) {
                while (rs.next()) {
                    emit("table_type", rs.getString("TABLE_TYPE"));
                }
            }
            try (ResultSet rs = meta.getTables(null, "public", "j%" + suffix, null)) {
                while (rs.next()) {
                    emit("table", rs.getString("TABLE_SCHEM"), rs.getString("TABLE_NAME"), rs.getString("TABLE_TYPE"));
                }
            }
            for (String relation : List.of(clicks, users, perUser, slow)) {
                try (ResultSet rs = meta.getColumns(null, "public", relation, "%")) {
                    while (rs.next()) {
                        emit("column", rs.getString("TABLE_NAME"), rs.getInt("ORDINAL_POSITION"),
                                rs.getString("COLUMN_NAME"), rs.getString("TYPE_NAME"), rs.getInt("DATA_TYPE"),
                                rs.getString("IS_NULLABLE"));
                    }
                }
            }
            try (ResultSet rs = meta.getPrimaryKeys(null, "public", users)) {
                while (rs.next()) {
                    emit("primary_key", rs.getString("TABLE_NAME"), rs.getString("COLUMN_NAME"),
                            rs.getInt("KEY_SEQ"), rs.getString("PK_NAME"));
                }
            }
            List<String> typeNames = new ArrayList<>();
            try (ResultSet rs = meta.getTypeInfo()) {
                while (rs.next()) {
                    typeNames.add(rs.getString("TYPE_NAME") + ":" + rs.getInt("DATA_TYPE"));
                }
            }
            for (String wanted : List.of("int4", "int8", "text", "float8", "bool", "timestamptz")) {
                String found = typeNames.stream().filter(t -> t.startsWith(wanted + ":")).findFirst().orElse("missing");
                emit("type_info", found);
            }
            try (ResultSet rs = meta.getIndexInfo(null, "public", users, false, false)) {
                while (rs.next()) {
                    emit("index", rs.getString("INDEX_NAME"), rs.getString("COLUMN_NAME"),
                            rs.getShort("ORDINAL_POSITION"), rs.getBoolean("NON_UNIQUE"));
                }
            }
            typedValues(conn, "jtyped_" + suffix);
        }
        emit("done");
    }

    /**
     * Values of each common type written with PreparedStatement setters and read back; the read
     * runs more often than pgjdbc's prepareThreshold (5), after which it uses a named server-side
     * statement and binary results.
     */
    private static void typedValues(Connection conn, String table) throws SQLException {
        try (Statement st = conn.createStatement()) {
            st.execute("CREATE TABLE " + table + " (id INT PRIMARY KEY, big BIGINT, amount NUMERIC, "
                    + "score DOUBLE PRECISION, ok BOOLEAN, at TIMESTAMPTZ, day DATE, note TEXT)");
        }
        Timestamp at = Timestamp.from(Instant.parse("2025-01-02T03:04:05.123Z"));
        try (PreparedStatement ps = conn.prepareStatement("INSERT INTO " + table + " VALUES (?, ?, ?, ?, ?, ?, ?, ?)")) {
            for (int id = 1; id <= 3; id++) {
                ps.setInt(1, id);
                ps.setLong(2, 5_000_000_000L * id);
                ps.setBigDecimal(3, new BigDecimal("12.25").multiply(BigDecimal.valueOf(id)));
                ps.setDouble(4, id / 4.0);
                ps.setBoolean(5, id % 2 == 1);
                ps.setTimestamp(6, at);
                ps.setDate(7, Date.valueOf("2025-03-0" + id));
                if (id == 3) {
                    ps.setNull(8, java.sql.Types.VARCHAR);
                } else {
                    ps.setString(8, "note " + id);
                }
                ps.executeUpdate();
            }
        }
        try (PreparedStatement ps = conn.prepareStatement(
                "SELECT id, big, amount, score, ok, at, day, note FROM " + table + " WHERE id = ?")) {
            for (int round = 1; round <= 8; round++) {
                int id = (round - 1) % 3 + 1;
                ps.setInt(1, id);
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next()) {
                        emit("typed_row", round, rs.getInt("id"), rs.getLong("big"), rs.getBigDecimal("amount").stripTrailingZeros().toPlainString(),
                                rs.getDouble("score"), rs.getBoolean("ok"), rs.getTimestamp("at").toInstant(),
                                rs.getDate("day"), rs.getString("note"));
                    }
                }
            }
        }
    }
}
