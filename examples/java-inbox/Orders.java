// A Java app on mensageria, with nothing but JDBC (Debian's
// libpostgresql-jdbc-java): it enqueues in its business transactions by
// plain SQL, and applies what `mensageria receive` landed in its inbox
// queue in its own transactions. No Go, no mensageria library.
//
// Run it with the JDK's single-file launcher (Java 11 and later):
//
//   java -cp /usr/share/java/postgresql.jar examples/java-inbox/Orders.java enqueue \
//     --url 'jdbc:postgresql://127.0.0.1:5432/app?user=app' --outbox-schema mensageria --app-schema shop --count 100
//   java -cp /usr/share/java/postgresql.jar examples/java-inbox/Orders.java apply \
//     --url 'jdbc:postgresql://127.0.0.1:5432/billing?user=billing' --inbox-schema mensageria \
//     --app-schema billing --consumer faturamento.pedidos
//   java -cp /usr/share/java/postgresql.jar examples/java-inbox/Orders.java refusals --url ... --outbox-schema mensageria
//
// The sending side runs `mensageria relay` (which owns the type in the
// ownership catalog), the receiving side `mensageria receive`.
// cmd/mensageria/internal/polyglot runs exactly this program, with both daemons killed
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
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.postgresql.PGConnection;
import org.postgresql.util.PGobject;

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
    // transaction each; every --rollback-every'th transaction rolls back
    // instead (its order and its message both vanish). The app's own
    // orders table is the record of what was committed.
    static void enqueue(Connection c, Map<String, String> opt) throws SQLException {
        String outbox = ident(need(opt, "outbox-schema")) + ".outbox";
        String app = ident(need(opt, "app-schema"));
        int count = Integer.parseInt(opt.getOrDefault("count", "100"));
        int first = Integer.parseInt(opt.getOrDefault("first", "1"));
        int rollbackEvery = Integer.parseInt(opt.getOrDefault("rollback-every", "0"));
        try (Statement st = c.createStatement()) {
            st.execute("CREATE TABLE IF NOT EXISTS " + app + ".orders (id bigint PRIMARY KEY, total_cents bigint NOT NULL)");
        }
        c.setAutoCommit(false);
        // The casts: JDBC sends a String parameter as varchar, and PostgreSQL
        // does not turn varchar into json by itself. Either cast in the SQL
        // (?::json, as the payload below), or send a PGobject of type json
        // (as the headers below), or connect with stringtype=unspecified and
        // let the server infer the type of every string parameter.
        String order = "INSERT INTO " + app + ".orders (id, total_cents) VALUES (?, ?)";
        String message = "INSERT INTO " + outbox + " (type, key, payload, headers) VALUES (?, ?, ?::json, ?)";
        int committed = 0, rolledBack = 0;
        try (PreparedStatement o = c.prepareStatement(order); PreparedStatement m = c.prepareStatement(message)) {
            for (int i = first; i < first + count; i++) {
                long total = 1000L + i % 977;
                o.setLong(1, i);
                o.setLong(2, total);
                o.executeUpdate();
                m.setString(1, TYPE);
                m.setString(2, "pedido-" + i);
                m.setString(3, "{\"id\": " + i + ", \"total_cents\": " + total + "}");
                PGobject headers = new PGobject();
                headers.setType("json");
                // Headers: a JSON object whose values are strings; omitted
                // or '{}' when there are none.
                headers.setValue("{\"X-Request-Id\": \"java-" + i + "\"}");
                m.setObject(4, headers);
                m.executeUpdate();
                if (rollbackEvery > 0 && i % rollbackEvery == 0) {
                    c.rollback();
                    rolledBack++;
                } else {
                    c.commit();
                    committed++;
                }
            }
        } catch (SQLException e) {
            c.rollback();
            throw e;
        }
        System.out.println("enqueued committed=" + committed + " rolled_back=" + rolledBack);
    }

    // apply takes what the receive daemon stored, in the app's own
    // transactions: claim (a row lock, SKIP LOCKED), the business write, the
    // applied mark, commit. A row whose write fails is rolled back to its
    // savepoint and recorded as failed, due again a second later. It waits
    // for the daemon's NOTIFY between rounds, and polls every second too.
    // With --until N it stops once the invoices table holds N rows.
    static void apply(Connection c, Map<String, String> opt) throws SQLException, InterruptedException {
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
        c.setAutoCommit(false);
        PGConnection pg = c.unwrap(PGConnection.class);
        Pattern total = Pattern.compile("\"total_cents\"\\s*:\\s*(\\d+)");
        long applied = 0, failed = 0;
        try (PreparedStatement claim = c.prepareStatement(
                     "SELECT id, key, message_id, payload::text, attempts FROM " + inbox + ".inbox_claim(?, ?)");
             PreparedStatement invoice = c.prepareStatement(
                     "INSERT INTO " + app + ".invoices (order_key, message_id, total_cents) VALUES (?, ?::uuid, ?)");
             PreparedStatement done = c.prepareStatement("SELECT " + inbox + ".inbox_applied(?)");
             PreparedStatement fail = c.prepareStatement("SELECT " + inbox + ".inbox_failed(?, ?, interval '1 second')");
             PreparedStatement have = c.prepareStatement("SELECT count(*) FROM " + app + ".invoices")) {
            while (true) {
                claim.setString(1, consumer);
                claim.setInt(2, 100);
                int rows = 0;
                try (ResultSet rs = claim.executeQuery()) {
                    while (rs.next()) {
                        rows++;
                        long id = rs.getLong(1);
                        String key = rs.getString(2);
                        Savepoint sp = c.setSavepoint();
                        try {
                            if (failEvery > 0 && id % failEvery == 0 && rs.getInt(5) == 0) {
                                throw new SQLException("the first attempt of every " + failEvery + "th row fails");
                            }
                            Matcher mt = total.matcher(rs.getString(4));
                            if (!mt.find()) {
                                throw new SQLException("payload without total_cents");
                            }
                            invoice.setString(1, key);
                            invoice.setString(2, rs.getString(3));
                            invoice.setLong(3, Long.parseLong(mt.group(1)));
                            invoice.executeUpdate();
                            done.setLong(1, id);
                            done.execute();
                            c.releaseSavepoint(sp);
                            applied++;
                        } catch (SQLException e) {
                            // MS010 from inbox_applied: another transaction
                            // applied or parked the row; nothing to do but
                            // roll back. Anything else is this row's failure.
                            c.rollback(sp);
                            if ("MS010".equals(e.getSQLState())) {
                                throw e;
                            }
                            fail.setLong(1, id);
                            fail.setString(2, e.getMessage());
                            fail.execute();
                            failed++;
                        }
                    }
                }
                c.commit();
                if (rows > 0) {
                    continue;
                }
                if (until > 0) {
                    try (ResultSet rs = have.executeQuery()) {
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
        }
        System.out.println("applied " + applied + " failed " + failed);
    }

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
