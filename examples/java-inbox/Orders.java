// A Java app on mensageria, with nothing but JDBC (Debian's
// libpostgresql-jdbc-java) and Jackson for JSON (Debian's
// libjackson2-databind-java): it enqueues in its business transactions by
// plain SQL, and applies what `mensageria receive` landed in its inbox
// queue in its own transactions. No Go, no mensageria library.
//
// Run it with the JDK's single-file launcher (Java 17 and later):
//
//   CP=/usr/share/java/postgresql.jar:/usr/share/java/jackson-databind.jar:/usr/share/java/jackson-core.jar:/usr/share/java/jackson-annotations.jar
//   java -cp $CP examples/java-inbox/Orders.java enqueue \
//     --url 'jdbc:postgresql://127.0.0.1:5432/app?user=app' --outbox-schema mensageria --app-schema shop --count 100
//   java -cp $CP examples/java-inbox/Orders.java apply \
//     --url 'jdbc:postgresql://127.0.0.1:5432/billing?user=billing' --inbox-schema mensageria \
//     --app-schema billing --consumer faturamento.pedidos
//   java -cp $CP examples/java-inbox/Orders.java refusals --url ... --outbox-schema mensageria
//
// The parts between "README:begin" and "README:end" are the README's Java
// snippets, word for word (the root package's TestReadmeCodeIsCompiledCode).
//
// The sending side runs `mensageria relay` (which owns the type in the
// ownership catalog), the receiving side `mensageria receive`.
// tests/polyglot runs exactly this program, with both daemons killed
// mid-way, and counts what arrived.

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.util.HashMap;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.postgresql.PGConnection;

public class Orders {
    static final String TYPE = "pedido.criado";

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
    // (its message's type has no owner: MS001) and rolls back, its order
    // with it. The app's own orders table is the record of what was
    // committed.
    static void enqueue(Connection c, Map<String, String> opt) throws SQLException {
        String outbox = ident(need(opt, "outbox-schema")) + ".outbox";
        String app = ident(need(opt, "app-schema"));
        int count = Integer.parseInt(opt.getOrDefault("count", "100"));
        int first = Integer.parseInt(opt.getOrDefault("first", "1"));
        int rollbackEvery = Integer.parseInt(opt.getOrDefault("rollback-every", "0"));
        try (Statement st = c.createStatement()) {
            st.execute("CREATE TABLE IF NOT EXISTS " + app + ".orders (id bigint PRIMARY KEY, total_cents bigint NOT NULL)");
        }
        int committed = 0, rolledBack = 0;
        for (int i = first; i < first + count; i++) {
            boolean refused = rollbackEvery > 0 && i % rollbackEvery == 0;
            try {
                placeOrder(c, app, outbox, refused ? "pedido.nobody.owns" : TYPE, i, 1000L + i % 977, "java-" + i);
                committed++;
            } catch (SQLException e) {
                if (!refused || !"MS001".equals(e.getSQLState())) {
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
    // JDBC sends a String as varchar, which PostgreSQL does not turn into
    // json by itself: hence ?::json (or a PGobject of type json, or the
    // connection property stringtype=unspecified).
    static void placeOrder(Connection c, String app, String outbox, String type, long id, long total, String requestId)
            throws SQLException {
        c.setAutoCommit(false);
        try (PreparedStatement order = c.prepareStatement("INSERT INTO " + app + ".orders (id, total_cents) VALUES (?, ?)");
             PreparedStatement msg = c.prepareStatement(
                     "INSERT INTO " + outbox + " (type, key, payload, headers) VALUES (?, ?, ?::json, ?::json)")) {
            order.setLong(1, id);
            order.setLong(2, total);
            order.executeUpdate();                                   // the business write
            msg.setString(1, type);
            msg.setString(2, "pedido-" + id);                        // the natural key
            msg.setString(3, JSON.createObjectNode().put("id", id).put("total_cents", total).toString());
            msg.setString(4, JSON.createObjectNode().put("X-Request-Id", requestId).toString());
            msg.executeUpdate();                                     // MS001..MS004: the outbox refused it
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

    // apply takes what the receive daemon stored, in the app's own
    // transactions (applyRound), round after round. It waits for the
    // daemon's NOTIFY between rounds, and polls every second too. With
    // --until N it stops once the invoices table holds N rows.
    static void apply(Connection c, Map<String, String> opt) throws Exception {
        String inbox = ident(need(opt, "inbox-schema"));
        String app = ident(need(opt, "app-schema"));
        String consumer = need(opt, "consumer");
        long until = Long.parseLong(opt.getOrDefault("until", "0"));
        int failEvery = Integer.parseInt(opt.getOrDefault("fail-every", "0"));
        try (Statement st = c.createStatement()) {
            // No unique key on order_key: a row applied twice would show as
            // two invoices, which is what the black-box test counts.
            st.execute("CREATE TABLE IF NOT EXISTS " + app + ".invoices (order_key text NOT NULL, message_id uuid NOT NULL, total_cents bigint NOT NULL)");
            st.execute("LISTEN " + inbox + "_inbox");
        }
        PGConnection pg = c.unwrap(PGConnection.class);
        Business invoice = (conn, row, payload) -> {
            if (failEvery > 0 && row.getLong("id") % failEvery == 0 && row.getInt("attempts") == 0) {
                throw new IllegalStateException("the first attempt of every " + failEvery + "th row fails");
            }
            try (PreparedStatement ins = conn.prepareStatement(
                    "INSERT INTO " + app + ".invoices (order_key, message_id, total_cents) VALUES (?, ?::uuid, ?)")) {
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
                done = applyRound(c, inbox, consumer, invoice);
            } catch (SQLException e) {
                if (!"MS010".equals(e.getSQLState())) {
                    throw e;
                }
                System.err.println("round rolled back: " + e.getMessage());
                continue; // the next claim no longer finds that row
            }
            applied += done[0];
            failed += done[1];
            if (done[0] + done[1] > 0) {
                continue;
            }
            if (until > 0) {
                try (Statement st = c.createStatement(); ResultSet rs = st.executeQuery("SELECT count(*) FROM " + app + ".invoices")) {
                    rs.next();
                    long n = rs.getLong(1);
                    c.commit();
                    if (n >= until) {
                        break;
                    }
                }
            }
            pg.getNotifications(1000); // a NOTIFY, or a second
        }
        System.out.println("applied " + applied + " failed " + failed);
    }

    // README:begin java-apply
    // Business is the app's write for one inbox row, in the row's
    // transaction (the example's: an invoice).
    interface Business {
        void apply(Connection c, ResultSet row, JsonNode payload) throws Exception;
    }

    // One round: claim up to 100 rows (row locks, SKIP LOCKED), apply each
    // under a savepoint with its business write, mark it applied, commit.
    // A row whose write fails is rolled back alone and recorded as failed
    // (due again later; parked as dead after the consumer's attempts).
    // Returns {applied, failed}.
    static int[] applyRound(Connection c, String inbox, String consumer, Business business) throws SQLException {
        c.setAutoCommit(false);
        int applied = 0, failed = 0;
        try (PreparedStatement claim = c.prepareStatement(
                     "SELECT id, key, message_id, payload::text, attempts FROM " + inbox + ".inbox_claim(?, 100)");
             PreparedStatement done = c.prepareStatement("SELECT " + inbox + ".inbox_applied(?)");
             PreparedStatement fail = c.prepareStatement("SELECT " + inbox + ".inbox_failed(?, ?, interval '1 second')")) {
            claim.setString(1, consumer);
            try (ResultSet row = claim.executeQuery()) {
                while (row.next()) {
                    long id = row.getLong("id");
                    Savepoint sp = c.setSavepoint();
                    try {
                        JsonNode payload = JSON.readTree(row.getString("payload")); // Jackson
                        business.apply(c, row, payload);
                        done.setLong(1, id);
                        done.execute();
                        c.releaseSavepoint(sp);
                        applied++;
                    } catch (SQLException e) {
                        c.rollback(sp);
                        if ("MS010".equals(e.getSQLState())) {
                            throw e; // another transaction applied or parked the row: roll the round back
                        }
                        markFailed(fail, id, e);
                        failed++;
                    } catch (Exception e) {                    // a bad payload, a bug in the business code
                        c.rollback(sp);
                        markFailed(fail, id, e);
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

    static void markFailed(PreparedStatement fail, long id, Exception e) throws SQLException {
        fail.setLong(1, id);
        fail.setString(2, String.valueOf(e));
        fail.execute();
    }
    // README:end java-apply

    // refusals shows what the database answers to enqueues that break its
    // rules, one SQLSTATE each: branch on the code, never on the message.
    static void refusals(Connection c, Map<String, String> opt) throws SQLException {
        String outbox = ident(need(opt, "outbox-schema")) + ".outbox";
        String[][] cases = {
            {"unowned", "nobody.owns.this", "k", "{}"},
            {"empty-key", TYPE, "", "{}"},
            {"long-key", TYPE, "é".repeat(501), "{}"}, // 501 characters, 1,002 bytes
            {"empty-type", "", "k", "{}"},
            {"number-header", TYPE, "k", "{\"attempt\": 1}"},
        };
        for (String[] k : cases) {
            try (PreparedStatement st = c.prepareStatement("INSERT INTO " + outbox + " (type, key, payload, headers) VALUES (?, ?, '{}', ?::json)")) {
                st.setString(1, k[1]);
                st.setString(2, k[2]);
                st.setString(3, k[3]);
                st.executeUpdate();
                System.out.println(k[0] + " accepted");
            } catch (SQLException e) {
                String what = switch (e.getSQLState()) {
                    case "MS001" -> "no app owns the type: run its relay, or `mensageria owners register`";
                    case "MS002" -> "the key must be 1 to 1000 bytes";
                    case "MS003" -> "the type must be 1 to 200 bytes";
                    case "MS004" -> "headers must be a JSON object of strings";
                    default -> "unexpected";
                };
                System.out.println(k[0] + " " + e.getSQLState() + " " + what);
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

    // ident allows the lower-case identifiers mensageria's schemas are.
    static String ident(String s) {
        if (!s.matches("[a-z_][a-z0-9_]{0,62}")) {
            System.err.println("not a lower-case SQL identifier: " + s);
            System.exit(2);
        }
        return s;
    }

    static void usage() {
        System.err.println("usage: Orders enqueue|apply|refusals --url JDBC_URL [--outbox-schema S] [--inbox-schema S] [--app-schema S] [--consumer C] [--count N] [--first N] [--rollback-every K] [--until N] [--fail-every M]");
        System.exit(2);
    }
}
