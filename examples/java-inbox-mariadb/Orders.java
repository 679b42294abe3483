// A Java app on mensageria over MariaDB, with nothing but JDBC (MariaDB
// Connector/J, Debian's libmariadb-java) and Jackson for JSON (Debian's
// libjackson2-databind-java): it enqueues in its business transactions by
// plain SQL, and applies what `mensageria receive` landed in its inbox
// queue in its own transactions. No Go, no mensageria library. The same
// program on PostgreSQL is examples/java-inbox; this one takes the same
// command line.
//
// On MariaDB a schema is a database, so mensageria's `schema:` is a
// table-name prefix in the connection's database: --outbox-schema
// mensageria is the table mensageria_outbox. The app's own tables take a
// prefix too (--app-schema shop: shop_orders), so that one database holds
// everything and the business write and the message share a transaction.
// See README.md here for how to run it.
//
// The parts between "README:begin" and "README:end" are docs/mysql.md's
// Java snippets, word for word (the root package's
// TestMySQLDocCodeIsCompiledCode).
//
// tests/polyglot runs exactly this program between `mensageria relay`
// and `mensageria receive`, both killed mid-way, and counts what arrived.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

public class Orders {
    static final String TYPE = "pedido.criado";

    // NOW is the database clock as the inbox queue keeps times: unix
    // microseconds, UTC (driver/mysql/queries' {{now}}).
    static final String NOW = "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))";

    // A row that failed this many times is parked as dead, with its reason.
    static final int MAX_ATTEMPTS = 20;

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            usage();
        }
        Map<String, String> opt = new HashMap<>();
        for (int i = 1; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                usage();
            }
            opt.put(args[i].substring(2), args[i + 1]);
        }
        try (Connection c = DriverManager.getConnection(need(opt, "url"))) {
            switch (args[0]) {
                case "enqueue" -> enqueue(c, opt);
                case "apply" -> apply(c, opt);
                case "refusals" -> refusals(c, opt);
                default -> usage();
            }
        }
    }

    // enqueue writes --count orders, each with its message, in one business
    // transaction each; every --rollback-every'th transaction fails instead
    // (its message's type has no owner) and rolls back, its order with it.
    // The app's own orders table is the record of what was committed.
    static void enqueue(Connection c, Map<String, String> opt) throws SQLException {
        String outbox = table(need(opt, "outbox-schema"), "outbox");
        String orders = table(need(opt, "app-schema"), "orders");
        int count = Integer.parseInt(opt.getOrDefault("count", "100"));
        int first = Integer.parseInt(opt.getOrDefault("first", "1"));
        int rollbackEvery = Integer.parseInt(opt.getOrDefault("rollback-every", "0"));
        try (Statement st = c.createStatement()) {
            st.execute("CREATE TABLE IF NOT EXISTS " + orders + " (id BIGINT PRIMARY KEY, total_cents BIGINT NOT NULL) ENGINE = InnoDB");
        }
        int committed = 0, rolledBack = 0;
        for (int i = first; i < first + count; i++) {
            boolean refused = rollbackEvery > 0 && i % rollbackEvery == 0;
            try {
                placeOrder(c, orders, outbox, refused ? "pedido.nobody.owns" : TYPE, i, 1000L + i % 977, "java-" + i);
                committed++;
            } catch (SQLException e) {
                String why = refusal(e);
                if (!refused || why == null || !why.contains("has no owner app")) {
                    throw e;
                }
                rolledBack++;
            }
        }
        System.out.println("enqueued committed=" + committed + " rolled_back=" + rolledBack);
    }

    // README:begin java-enqueue
    static final ObjectMapper JSON = new ObjectMapper(); // Jackson, for the JSON in and out

    // One business transaction: the order and its message, or neither.
    // MariaDB's JSON columns take JSON text as a plain string; every
    // column not named has a default (message_id a UUID). `key` is a
    // reserved word: quote it.
    static void placeOrder(Connection c, String orders, String outbox, String type, long id, long total, String requestId)
            throws SQLException {
        c.setAutoCommit(false);
        try (PreparedStatement order = c.prepareStatement("INSERT INTO " + orders + " (id, total_cents) VALUES (?, ?)");
             PreparedStatement msg = c.prepareStatement(
                     "INSERT INTO " + outbox + " (type, `key`, payload, headers) VALUES (?, ?, ?, ?)")) {
            order.setLong(1, id);
            order.setLong(2, total);
            order.executeUpdate();                                   // the business write
            msg.setString(1, type);
            msg.setString(2, "pedido-" + id);                        // the natural key
            msg.setString(3, JSON.createObjectNode().put("id", id).put("total_cents", total).toString());
            msg.setString(4, JSON.createObjectNode().put("X-Request-Id", requestId).toString());
            msg.executeUpdate();                                     // SQLSTATE 45000: the outbox refused it
            c.commit();
        } catch (SQLException | RuntimeException e) {
            rollback(c, e);                                          // whatever failed, nothing stays
            throw e;
        }
    }

    // rollback undoes the transaction after e, keeping e the error thrown
    // when the rollback fails too (a broken connection).
    static void rollback(Connection c, Exception e) {
        try {
            c.rollback();
        } catch (SQLException r) {
            e.addSuppressed(r);
        }
    }
    // README:end java-enqueue

    // README:begin java-refusal
    // The outbox's triggers refuse a message with SIGNAL SQLSTATE '45000'
    // (error 1644) and a text that starts "mensageria: " and says what to
    // fix: an unowned type ("... has no owner app ..."), an empty or too
    // long type or key, headers that are not an object of strings.
    // Connector/J puts "(conn=N) " before the server's text, and 2.7 throws
    // it as a SQLTransientConnectionException although the connection is
    // fine: go by the SQLSTATE and the code, not the class. refusal
    // returns the text, or null for any other failure (a lost connection,
    // a deadlock), which is no verdict on the message.
    static final Pattern REFUSAL = Pattern.compile("^(?:\\(conn=\\d+\\) )?(mensageria: .*)$", Pattern.DOTALL);

    static String refusal(SQLException e) {
        if (!"45000".equals(e.getSQLState()) || e.getErrorCode() != 1644 || e.getMessage() == null) {
            return null;
        }
        Matcher m = REFUSAL.matcher(e.getMessage());
        return m.matches() ? m.group(1) : null;
    }
    // README:end java-refusal

    // apply takes what the receive daemon stored, in the app's own
    // transactions (applyRound), round after round. MariaDB has no
    // LISTEN/NOTIFY: when a round finds nothing it polls again after
    // --poll-ms (default 250). With --until N it stops once the invoices
    // table holds N rows.
    static void apply(Connection c, Map<String, String> opt) throws Exception {
        String queue = table(need(opt, "inbox-schema"), "inbox_queue");
        String invoices = table(need(opt, "app-schema"), "invoices");
        String consumer = need(opt, "consumer");
        long until = Long.parseLong(opt.getOrDefault("until", "0"));
        int failEvery = Integer.parseInt(opt.getOrDefault("fail-every", "0"));
        long pollMs = Long.parseLong(opt.getOrDefault("poll-ms", "250"));
        try (Statement st = c.createStatement()) {
            // No unique key on order_key: a row applied twice would show as
            // two invoices, which is what the black-box test counts.
            st.execute("CREATE TABLE IF NOT EXISTS " + invoices + " (order_key VARBINARY(1000) NOT NULL, message_id CHAR(36) NOT NULL, total_cents BIGINT NOT NULL) ENGINE = InnoDB");
        }
        // A claim at READ COMMITTED locks the rows it takes and no gaps
        // between them, so it never holds up the receive daemon's INSERTs
        // (InnoDB's default, REPEATABLE READ, would).
        c.setTransactionIsolation(Connection.TRANSACTION_READ_COMMITTED);
        Business invoice = (conn, row, payload) -> {
            if (failEvery > 0 && row.getLong("id") % failEvery == 0 && row.getInt("attempts") == 0) {
                throw new IllegalStateException("the first attempt of every " + failEvery + "th row fails");
            }
            try (PreparedStatement ins = conn.prepareStatement(
                    "INSERT INTO " + invoices + " (order_key, message_id, total_cents) VALUES (?, ?, ?)")) {
                ins.setString(1, row.getString("key"));
                ins.setString(2, row.getString("message_id"));
                ins.setLong(3, payload.get("total_cents").asLong());
                ins.executeUpdate();
            }
        };
        long applied = 0, failed = 0;
        while (true) {
            int[] done;
            try {
                done = applyRound(c, queue, consumer, invoice);
            } catch (NotPendingException e) {
                System.err.println("round rolled back: " + e.getMessage());
                continue; // the next claim no longer finds that row
            }
            applied += done[0];
            failed += done[1];
            if (done[0] + done[1] > 0) {
                continue;
            }
            if (until > 0) {
                try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT count(*) FROM " + invoices)) {
                    rs.next();
                    long n = rs.getLong(1);
                    c.commit();
                    if (n >= until) {
                        break;
                    }
                }
            }
            Thread.sleep(pollMs);
        }
        System.out.println("applied " + applied + " failed " + failed);
    }

    // Business is the app's write for one inbox row, in the row's
    // transaction (the example's: an invoice).
    interface Business {
        void apply(Connection c, ResultSet row, JsonNode payload) throws Exception;
    }

    // NotPendingException: marking a claimed row changed nothing, so the
    // row is no longer pending (an operator applied or parked it); the
    // round rolls back.
    static class NotPendingException extends SQLException {
        NotPendingException(long id) {
            super("inbox queue row " + id + " is not pending");
        }
    }

    // One round: claim up to 100 due rows (row locks, SKIP LOCKED), apply
    // each under a savepoint with its business write, mark it applied,
    // commit. A row whose write fails is rolled back alone and recorded as
    // failed (due again in a second), or parked as dead after MAX_ATTEMPTS.
    // The statements are driver/mysql/queries/inbox_*.sql. Returns
    // {applied, failed}.
    static int[] applyRound(Connection c, String queue, String consumer, Business business) throws SQLException {
        c.setAutoCommit(false);
        int applied = 0, failed = 0;
        try (PreparedStatement claim = c.prepareStatement(
                     "SELECT id, `key`, message_id, payload, attempts FROM " + queue
                     + " WHERE consumer = ? AND state = 'pending' AND available_at <= " + NOW
                     + " ORDER BY available_at, id LIMIT 100 FOR UPDATE SKIP LOCKED");
             PreparedStatement done = c.prepareStatement(
                     "UPDATE " + queue + " SET state = 'applied', applied_at = " + NOW + " WHERE id = ? AND state = 'pending'");
             PreparedStatement fail = c.prepareStatement(
                     "UPDATE " + queue + " SET attempts = attempts + 1, last_error = ?, available_at = " + NOW
                     + " + CAST(? * 1000000 AS SIGNED) WHERE id = ? AND state = 'pending'");
             PreparedStatement dead = c.prepareStatement(
                     "UPDATE " + queue + " SET state = 'dead', attempts = attempts + 1, last_error = ? WHERE id = ? AND state = 'pending'")) {
            claim.setString(1, consumer);
            try (ResultSet row = claim.executeQuery()) {
                while (row.next()) {
                    long id = row.getLong("id");
                    Savepoint sp = c.setSavepoint();
                    try {
                        JsonNode payload = JSON.readTree(row.getString("payload")); // Jackson
                        business.apply(c, row, payload);
                        done.setLong(1, id);
                        if (done.executeUpdate() != 1) {
                            throw new NotPendingException(id);
                        }
                        c.releaseSavepoint(sp);
                        applied++;
                    } catch (NotPendingException e) {
                        throw e;                                   // roll the round back
                    } catch (Exception e) {                        // a failed write, a bad payload, a bug
                        c.rollback(sp);
                        markFailed(fail, dead, id, row.getInt("attempts"), e);
                        failed++;
                    }
                }
            }
            c.commit();
        } catch (SQLException | RuntimeException e) {
            rollback(c, e);                                    // nothing of the round stays, the locks go
            throw e;
        }
        return new int[] {applied, failed};
    }

    // markFailed records a failed attempt of row id: due again in a second,
    // or parked as dead once it has failed MAX_ATTEMPTS times.
    static void markFailed(PreparedStatement fail, PreparedStatement dead, long id, int attempts, Exception e)
            throws SQLException {
        PreparedStatement mark;
        if (attempts + 1 < MAX_ATTEMPTS) {
            mark = fail;
            fail.setString(1, String.valueOf(e));
            fail.setInt(2, 1);                                 // seconds until due again
            fail.setLong(3, id);
        } else {
            mark = dead;
            dead.setString(1, String.valueOf(e));
            dead.setLong(2, id);
        }
        if (mark.executeUpdate() != 1) {
            throw new NotPendingException(id);
        }
    }

    // refusals shows what the database answers to enqueues that break its
    // rules: SQLSTATE 45000 and the text that says which rule.
    static void refusals(Connection c, Map<String, String> opt) throws SQLException {
        String outbox = table(need(opt, "outbox-schema"), "outbox");
        String[][] cases = {
            {"unowned", "nobody.owns.this", "k", "{}"},
            {"empty-key", TYPE, "", "{}"},
            {"long-key", TYPE, "é".repeat(501), "{}"}, // 501 characters, 1,002 bytes
            {"empty-type", "", "k", "{}"},
            {"number-header", TYPE, "k", "{\"attempt\": 1}"},
        };
        for (String[] k : cases) {
            try (PreparedStatement st = c.prepareStatement("INSERT INTO " + outbox + " (type, `key`, payload, headers) VALUES (?, ?, '{}', ?)")) {
                st.setString(1, k[1]);
                st.setString(2, k[2]);
                st.setString(3, k[3]);
                st.executeUpdate();
                System.out.println(k[0] + " accepted");
            } catch (SQLException e) {
                String why = refusal(e);
                System.out.println(k[0] + " " + e.getSQLState() + " " + (why != null ? why : "unexpected: " + e.getMessage()));
            }
        }
    }

    static String need(Map<String, String> opt, String name) {
        String v = opt.get(name);
        if (v == null || v.isEmpty()) {
            System.err.println("missing --" + name);
            System.exit(2);
        }
        return v;
    }

    // table is prefix_name, for the lower-case prefixes mensageria's
    // `schema:` takes (at most 32 characters).
    static String table(String prefix, String name) {
        if (!prefix.matches("[a-z_][a-z0-9_]{0,31}")) {
            System.err.println("not a lower-case table-name prefix of at most 32 characters: " + prefix);
            System.exit(2);
        }
        return prefix + "_" + name;
    }

    static void usage() {
        System.err.println("usage: Orders enqueue|apply|refusals --url JDBC_URL [--outbox-schema P] [--inbox-schema P] [--app-schema P] [--consumer C] [--count N] [--first N] [--rollback-every K] [--until N] [--fail-every M] [--poll-ms MS]");
        System.exit(2);
    }
}
