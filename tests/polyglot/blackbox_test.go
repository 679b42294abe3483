package polyglot

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

// app is one of the example programs, as a command line per mode.
type app struct {
	name string
	dir  string
	// run returns the program and its arguments for one mode.
	run func(mode string, args ...string) (string, []string)
	// url is the database address in the form its driver takes.
	url string
	// db is the database the program, the daemons and the checks share.
	db dbKind
}

// javaProgram runs the Java example src (a single file, from the
// repository's root) with Debian's JDBC driver jar, and Jackson: the
// example reads payloads with it. scripts/polyglot.sh installs them.
func javaProgram(t *testing.T, db dbKind, src, driverJar, driverPkg string) app {
	java := need(t, "a Java runtime", "java")
	need(t, "a JDK (the single-file launcher compiles the example)", "javac")
	jar := need(t, "Debian's "+db.name()+" JDBC driver ("+driverPkg+")", driverJar)
	for _, j := range []string{"jackson-databind", "jackson-core", "jackson-annotations"} {
		jar += ":" + need(t, "Debian's Jackson (libjackson2-databind-java)", "/usr/share/java/"+j+".jar")
	}
	src, err := filepath.Abs(filepath.Join(root, src))
	if err != nil {
		t.Fatal(err)
	}
	return app{name: "java", dir: filepath.Dir(src), url: db.jdbcURL(t), db: db, run: func(mode string, args ...string) (string, []string) {
		return java, append([]string{"-cp", jar, src, mode}, args...)
	}}
}

func javaApp(t *testing.T) app {
	return javaProgram(t, postgresDB(t), "examples/java-inbox/Orders.java", "/usr/share/java/postgresql.jar", "libpostgresql-jdbc-java")
}

// javaMariaApp is examples/java-inbox-mariadb on MariaDB Connector/J.
func javaMariaApp(t *testing.T) app {
	return javaProgram(t, mariaDB(t), "examples/java-inbox-mariadb/Orders.java", "/usr/share/java/mariadb-java-client.jar", "libmariadb-java")
}

func nodeApp(t *testing.T) app {
	node := need(t, "Node.js", "node")
	dir := need(t, "the example's node-pg", filepath.Join(root, "examples/node-inbox/node_modules/pg/package.json"))
	dir = filepath.Dir(filepath.Dir(filepath.Dir(dir)))
	return app{name: "node", dir: dir, url: testdb.URL(), db: postgresDB(t), run: func(mode string, args ...string) (string, []string) {
		return node, append([]string{filepath.Join(dir, "orders.js"), mode}, args...)
	}}
}

// TestJavaAppThroughBothDaemons and TestNodeAppThroughBothDaemons: the
// example program of each language enqueues orders in business
// transactions, one in seven rolled back; `mensageria relay` delivers them
// over HTTP to `mensageria receive`, which lands them in the inbox queue;
// the program applies them in its own transactions, the first attempt of
// every tenth row failing and retried. The relay, the receive daemon and the
// applier are each SIGKILLed while messages flow, and restarted. In the
// end every committed order has exactly one invoice, no rolled-back one has
// any, the inbox queue holds one applied row per committed message and
// nothing else, and the outbox is empty: nothing dead (a conflict would be),
// nothing pending.
func TestJavaAppThroughBothDaemons(t *testing.T) { throughBothDaemons(t, javaApp(t)) }

func TestNodeAppThroughBothDaemons(t *testing.T) { throughBothDaemons(t, nodeApp(t)) }

// TestJavaOnMariaDBThroughBothDaemons: the same, with
// examples/java-inbox-mariadb over MariaDB Connector/J, and the daemons on
// MariaDB: the program, the relay and the receive daemon share a database
// of the test's own, each with its own table-name prefix.
func TestJavaOnMariaDBThroughBothDaemons(t *testing.T) { throughBothDaemons(t, javaMariaApp(t)) }

func throughBothDaemons(t *testing.T, a app) {
	testdb.Long(t, "the "+a.name+" program between the relay and receive daemons on "+a.db.name())
	db := a.db
	bin := binary(t)
	out, shop := db.namespace(t, "pedidos"), db.namespace(t, "shop")
	in, billing := db.namespace(t, "faturamento"), db.namespace(t, "billing")
	dir := t.TempDir()
	const token = "polyglot-token-1"
	recvPort := freePort(t)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// A short lease, so that the rows the killed relay held come back
	// soon; quick retries while the receiver is down, and more of them
	// than its down time can use up.
	relayCfg := write("relay.yaml", fmt.Sprintf(`database: %s
schema: %s
app: pedidos
routes:
  - type: pedido.criado
    http:
      url: http://127.0.0.1:%d/m2m
      token: %s
      timeout: 2500ms
relay:
  batch: 50
  lease: 3s
  max_attempts: 1000
  backoff_base: 50ms
  backoff_max: 500ms
%s`, db.daemonURL(), out, recvPort, token, db.relaySettings()))
	recvCfg := write("receive.yaml", fmt.Sprintf(`database: %s
schema: %s
app: faturamento
receive:
  listen: 127.0.0.1:%d
  path: /m2m
  tokens: [%q]
%sconsumers:
  - name: faturamento.pedidos
    types: [pedido.criado]
`, db.daemonURL(), in, recvPort, token, db.receiveSettings()))

	// Deploy order for a SQL producer: migrate, record the type as the
	// app's, then enqueue (docs/config.md).
	for _, args := range [][]string{{"migrate", "up"}, {"owners", "register"}} {
		p := start(t, strings.Join(args, " "), dir, nil, bin, append(args, "--config", relayCfg)...)
		if code := p.wait(t, time.Minute); code != 0 {
			t.Fatalf("mensageria %v exited %d:\n%s", args, code, p.out.String())
		}
	}
	startRecv := func() *proc {
		p := start(t, "receive", dir, nil, bin, "receive", "--config", recvCfg, "--migrate")
		ready(t, "the receive daemon", fmt.Sprintf("http://127.0.0.1:%d/readyz", recvPort), time.Minute, p)
		return p
	}
	startRelay := func() *proc {
		return start(t, "relay", dir, nil, bin, "relay", "--config", relayCfg, "--listen=")
	}
	startApplier := func() *proc {
		prog, args := a.run("apply", "--url", a.url, "--inbox-schema", in, "--app-schema", billing,
			"--consumer", "faturamento.pedidos", "--fail-every", "10")
		return start(t, a.name+" apply", a.dir, nil, prog, args...)
	}
	enqueue := func(first, n int) *proc {
		prog, args := a.run("enqueue", "--url", a.url, "--outbox-schema", out, "--app-schema", shop,
			"--first", strconv.Itoa(first), "--count", strconv.Itoa(n), "--rollback-every", "7")
		return start(t, a.name+" enqueue", a.dir, nil, prog, args...)
	}
	committedBy := func(p *proc) int {
		line, err := lastLine(p.out.String(), "enqueued ")
		if err != nil {
			t.Fatalf("%s: %v:\n%s", p.name, err, p.out.String())
		}
		var c, r int
		if _, err := fmt.Sscanf(line, "enqueued committed=%d rolled_back=%d", &c, &r); err != nil {
			t.Fatalf("%s: %q: %v", p.name, line, err)
		}
		return c
	}
	q := func(sql string) int { return db.count(t, sql) }
	// The tables, by what they are, in this database's names.
	var (
		outbox   = db.table(out, "outbox")
		orders   = db.table(shop, "orders")
		queue    = db.table(in, "inbox_queue")
		dedup    = db.table(in, "inbox")
		invoices = db.table(billing, "invoices")
	)
	stored := func() int { return q("SELECT count(*) FROM " + queue) }
	applied := func() int {
		if !db.exists(t, billing, "invoices") {
			return 0
		}
		return q("SELECT count(*) FROM " + invoices)
	}

	recv := startRecv()
	relay := startRelay()
	applier := startApplier()
	const half = 300
	first := enqueue(1, half)

	// Each daemon is killed while the first half's messages flow: some are
	// stored already, and the rest of the first half and the whole second
	// half are still to come.
	mensageriatest.Eventually(t, 2*time.Minute, func() bool { return stored() >= 30 }, "the first deliveries")
	atRelayKill := stored()
	relay.kill()
	relay = startRelay()
	mensageriatest.Eventually(t, 2*time.Minute, func() bool { return stored() >= atRelayKill+30 }, "deliveries after the relay's restart")
	atRecvKill := stored()
	recv.kill()
	recv = startRecv()
	mensageriatest.Eventually(t, 2*time.Minute, func() bool { return applied() >= 20 }, "applications")
	atApplierKill := applied()
	applier.kill()
	applier = startApplier()
	if code := first.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("the first enqueue exited %d", code)
	}
	second := enqueue(half+1, half)
	if code := second.wait(t, 3*time.Minute); code != 0 {
		t.Fatalf("the second enqueue exited %d", code)
	}
	committed := committedBy(first) + committedBy(second)
	if atRelayKill >= committed || atRecvKill >= committed || atApplierKill >= committed {
		t.Fatalf("a kill came after everything was through: stored %d and %d, applied %d, of %d", atRelayKill, atRecvKill, atApplierKill, committed)
	}
	t.Logf("%d committed; relay killed at %d stored, receive at %d, the applier at %d applied", committed, atRelayKill, atRecvKill, atApplierKill)

	mensageriatest.Eventually(t, 4*time.Minute, func() bool { return applied() >= committed }, "every committed order's invoice")
	mensageriatest.Eventually(t, time.Minute, func() bool { return q("SELECT count(*) FROM "+outbox) == 0 }, "the outbox to empty")
	applier.kill()

	// The app's own records: its orders table says what committed.
	if n := q("SELECT count(*) FROM " + orders); n != committed {
		t.Fatalf("%d orders in the app's table, the program reported %d committed", n, committed)
	}
	rolledBack := 2*half - committed
	if want := 2 * half / 7; rolledBack != want {
		t.Fatalf("%d rolled back, want %d (one in seven)", rolledBack, want)
	}
	// SQL both databases run: CONCAT, not ||, which MariaDB reads as OR.
	checks := []struct {
		what string
		got  int
		want int
	}{
		{"invoices", q("SELECT count(*) FROM " + invoices), committed},
		{"orders invoiced more than once", q("SELECT count(*) FROM (SELECT order_key FROM " + invoices + " GROUP BY order_key HAVING count(*) > 1) d"), 0},
		{"committed orders without an invoice", q("SELECT count(*) FROM " + orders + " o WHERE NOT EXISTS (SELECT 1 FROM " + invoices + " i WHERE i.order_key = CONCAT('pedido-', o.id))"), 0},
		{"invoices of no committed order (rolled back, or unknown)", q("SELECT count(*) FROM " + invoices + " i WHERE NOT EXISTS (SELECT 1 FROM " + orders + " o WHERE i.order_key = CONCAT('pedido-', o.id))"), 0},
		{"invoices whose total is not the order's", q("SELECT count(*) FROM " + invoices + " i JOIN " + orders + " o ON i.order_key = CONCAT('pedido-', o.id) WHERE i.total_cents <> o.total_cents"), 0},
		{"inbox queue rows", q("SELECT count(*) FROM " + queue), committed},
		{"inbox queue rows not applied", q("SELECT count(*) FROM " + queue + " WHERE state <> 'applied'"), 0},
		{"dedup records", q("SELECT count(*) FROM " + dedup + " WHERE consumer = 'faturamento.pedidos'"), committed},
		{"outbox rows left (pending or dead)", q("SELECT count(*) FROM " + outbox), 0},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
	// The failure path ran: rows whose first application failed were
	// applied on a later attempt, each once.
	if n := q("SELECT count(*) FROM " + queue + " WHERE attempts > 0 AND state = 'applied'"); n < committed/20 {
		t.Errorf("%d rows applied after a failed attempt; the program fails the first attempt of one row in ten", n)
	}
}

// TestJavaRefusalsCarryTheirSQLSTATE and TestNodeRefusalsCarryTheirSQLSTATE:
// each program's refused enqueues come back with the SQLSTATE README's
// table names (MS001 to MS004), which the program branches on, and nothing
// of them is stored.
func TestJavaRefusalsCarryTheirSQLSTATE(t *testing.T) { refusals(t, javaApp(t)) }

func TestNodeRefusalsCarryTheirSQLSTATE(t *testing.T) { refusals(t, nodeApp(t)) }

// TestJavaOnMariaDBRefusalsCarryTheirSQLSTATE: on MariaDB every refusal
// is SQLSTATE 45000 (error 1644) with a text starting "mensageria: " that
// names the rule; the program prints it without Connector/J's
// "(conn=N) ", and nothing of it is stored.
func TestJavaOnMariaDBRefusalsCarryTheirSQLSTATE(t *testing.T) { refusals(t, javaMariaApp(t)) }

func refusals(t *testing.T, a app) {
	schema := a.db.namespace(t, "mensageria")
	ctx := context.Background()
	d := a.db.open(t, schema)
	if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: "pedidos"}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Register(ctx, driver.RegisterParams{App: "pedidos", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "pedido.criado"}}}); err != nil {
		t.Fatal(err)
	}
	prog, args := a.run("refusals", "--url", a.url, "--outbox-schema", schema)
	p := start(t, a.name+" refusals", a.dir, nil, prog, args...)
	if code := p.wait(t, 2*time.Minute); code != 0 {
		t.Fatalf("exit %d:\n%s", code, p.out.String())
	}
	want := a.db.refusals()
	got := strings.Split(strings.TrimSpace(p.out.String()), "\n")
	if len(got) != len(want) {
		t.Fatalf("printed %q, want one line per case", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("case %d: %q, want %q…", i, got[i], want[i])
		}
	}
	if n := a.db.count(t, "SELECT count(*) FROM "+a.db.table(schema, "outbox")); n != 0 {
		t.Errorf("%d refused rows stored", n)
	}
}
