package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

// The least-privilege roles of docs/security.md, end to end: two apps share
// a schema with row-level security on, and each of their processes runs as
// a role of its own, granted by the driver's SQL (GrantSQL) and nothing
// else: pedidos' relay delivers pedido.criado to faturamento's receive
// daemon, faturamento's relay delivers fatura.emitida to a receiver, SQL
// producers enqueue, and a console retries a dead letter. Each does its
// job; each is refused, or finds nothing, when it touches the other app's
// rows, its catalog entries or its election.
func TestEndToEndLeastPrivilegeRoles(t *testing.T) {
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	ctx := context.Background()
	admin := appFile(t, schema, "pedidos", "http://127.0.0.1:1/m2m", "pedido.criado")
	must(t, "migrate up", run(t, "", tokEnv, "migrate", "up", "--config", admin), 0)
	exec := func(q string) {
		t.Helper()
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// Every role of both apps, as the schema's owner grants them, from
	// what `migrate sql` prints.
	role := map[string]string{}
	for _, app := range []string{"pedidos", "faturamento"} {
		cfg := appFile(t, schema, app, "http://127.0.0.1:1/m2m", "unused."+app)
		for _, r := range postgres.Roles {
			name := testdb.Role(t, app+"_"+string(r))
			res := run(t, "", tokEnv, "migrate", "sql", "--grants", string(r), "--role", name, "--config", cfg)
			must(t, "migrate sql --grants "+string(r), res, 0, "GRANT USAGE ON SCHEMA "+schema+" TO "+name)
			exec(res.out)
			role[app+"/"+string(r)] = name
		}
	}
	res := run(t, "", tokEnv, "migrate", "sql", "--row-level-security", "--config", admin)
	must(t, "migrate sql --row-level-security", res, 0, "ENABLE ROW LEVEL SECURITY")
	exec(res.out)
	res = run(t, "", tokEnv, "migrate", "sql", "--grants", "relay", "--config", admin)
	must(t, "migrate sql --grants without --role", res, 2, "--role")
	url := func(key string) string { return testdb.URLAs(t, role[key]) }
	connect := func(key string) *pgxpool.Pool {
		t.Helper()
		p, err := pgxpool.New(ctx, url(key))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	relayKnobs := "relay: {batch: 20, lease: 2s, max_attempts: 3, poll_interval: 50ms, backoff_base: 10ms, backoff_max: 50ms}\n"

	// faturamento's receive daemon, as its role: no --migrate (the role
	// may not migrate), its consumer registered by itself.
	rcvCfg := writeFile(t, fmt.Sprintf("database: %s\nschema: %s\napp: faturamento\nreceive:\n  listen: 127.0.0.1:0\n  tokens: [tok-0123456789abcdef]\n"+
		"consumers:\n  - name: fat\n    types: [pedido.criado]\n    window: 1h\n", url("faturamento/receive"), schema))
	inbox := startReceive(t, rcvCfg, nil, "--migrate=false")

	// Both relays, as their roles.
	type relayProc struct {
		logs *syncBuffer
		addr string
		done chan int
	}
	rctx, stopRelays := context.WithCancel(ctx)
	defer stopRelays()
	roleEnv := map[string]string{"TEST_TOKEN": tokEnv["TEST_TOKEN"], "INBOX_TOKEN": "tok-0123456789abcdef"}
	startRelay := func(app, typ, to string) *relayProc {
		t.Helper()
		// pedidos delivers to faturamento's receive daemon, whose tokens
		// are 16 characters at least; the test receiver takes tokEnv's.
		token := "TEST_TOKEN"
		if app == "pedidos" {
			token = "INBOX_TOKEN"
		}
		cfg := writeFile(t, fmt.Sprintf("database: %s\nschema: %s\napp: %s\nroutes:\n  - type: %s\n    http: {url: %s, token: ${%s}, timeout: 1500ms}\n%s",
			url(app+"/relay"), schema, app, typ, to, token, relayKnobs))
		p := &relayProc{logs: &syncBuffer{}, done: make(chan int, 1)}
		go func() {
			p.done <- Run(rctx, []string{"relay", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json"},
				IO{Out: io.Discard, Err: p.logs, Env: func(k string) (string, bool) { v, ok := roleEnv[k]; return v, ok }})
		}()
		p.addr = waitAddr(t, p.logs, p.done)
		return p
	}
	rcv := newReceiver(t)
	relays := []*relayProc{
		startRelay("pedidos", "pedido.criado", inbox.url),
		startRelay("faturamento", "fatura.emitida", rcv.srv.URL+"/m2m"),
	}
	for _, p := range relays {
		mensageriatest.Eventually(t, 20*time.Second, func() bool {
			res, err := http.Get("http://" + p.addr + "/readyz")
			if err != nil {
				return false
			}
			res.Body.Close()
			return res.StatusCode == http.StatusOK
		}, "the relay ready")
	}

	// The producers enqueue their own app's types by plain SQL.
	refused := func(what string, err error) {
		t.Helper()
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Fatalf("%s = %v, want SQLSTATE 42501", what, err)
		}
	}
	enqueue := func(key, typ, k string) error {
		_, err := connect(key).Exec(ctx, "INSERT INTO "+schema+".outbox (type, key, payload) VALUES ($1, $2, '{}')", typ, k)
		return err
	}
	for i := range 5 {
		if err := enqueue("pedidos/producer", "pedido.criado", fmt.Sprint("p-", i)); err != nil {
			t.Fatalf("pedidos' producer: %v", err)
		}
	}
	for _, k := range []string{"f-1", "f-2", "refuse-1"} {
		if err := enqueue("faturamento/producer", "fatura.emitida", k); err != nil {
			t.Fatalf("faturamento's producer: %v", err)
		}
	}
	refused("pedidos' producer enqueueing faturamento's type", enqueue("pedidos/producer", "fatura.emitida", "x"))
	_, err := connect("faturamento/producer").Exec(ctx, "SELECT count(*) FROM "+schema+".outbox")
	refused("a producer reading the outbox", err)

	count := func(q string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		return count("SELECT count(*) FROM "+schema+".outbox WHERE state = 'pending'") == 0 &&
			count("SELECT count(*) FROM "+schema+".inbox_queue WHERE consumer = 'fat'") == 5 && rcv.keys() == 2
	}, "both apps' messages delivered or parked")
	var deadID int64
	if err := pool.QueryRow(ctx, "SELECT id FROM "+schema+".outbox WHERE state = 'dead' AND type = 'fatura.emitida'").Scan(&deadID); err != nil {
		t.Fatalf("faturamento's refused message is not dead: %v", err)
	}

	// Each role against the other app: nothing moves.
	zero := func(key, q string) {
		t.Helper()
		tag, err := connect(key).Exec(ctx, q)
		if err != nil {
			t.Fatalf("%s as %s: %v", q, key, err)
		}
		if tag.RowsAffected() != 0 {
			t.Fatalf("%s as %s changed %d rows", q, key, tag.RowsAffected())
		}
	}
	zero("pedidos/relay", "UPDATE "+schema+".outbox SET state = 'pending', attempts = 0 WHERE type = 'fatura.emitida'")
	zero("pedidos/relay", "UPDATE "+schema+".outbox SET type = 'pedido.criado' WHERE type = 'fatura.emitida'")
	zero("pedidos/relay", "DELETE FROM "+schema+".outbox WHERE type = 'fatura.emitida'")
	zero("pedidos/relay", "UPDATE "+schema+".owners SET app = 'pedidos' WHERE app = 'faturamento'")
	zero("pedidos/relay", "UPDATE "+schema+".leader SET epoch = epoch + 1 WHERE app = 'faturamento'")
	zero("pedidos/relay", "DELETE FROM "+schema+".inbox WHERE consumer = 'fat'")
	zero("pedidos/receive", "UPDATE "+schema+".inbox_queue SET attempts = attempts + 1 WHERE consumer = 'fat'")
	zero("pedidos/receive", "DELETE FROM "+schema+".inbox WHERE consumer = 'fat'")
	_, err = connect("pedidos/relay").Exec(ctx, "DELETE FROM "+schema+".owners WHERE app = 'faturamento'")
	refused("a relay deleting catalog entries", err)
	_, err = connect("pedidos/relay").Exec(ctx, "INSERT INTO "+schema+".owners (kind, name, app) VALUES ('type', 'fatura.cancelada', 'faturamento')")
	refused("a relay registering for another app", err)
	_, err = connect("faturamento/receive").Exec(ctx, "UPDATE "+schema+".outbox SET state = 'dead'")
	refused("a receive daemon writing the outbox", err)
	_, err = connect("faturamento/console").Exec(ctx, "UPDATE "+schema+".owners SET app = 'faturamento'")
	refused("a console writing the catalog", err)

	// pedidos' console, told it may act on every app: the database still
	// lets it retry only pedidos' dead letters.
	exec("INSERT INTO " + schema + ".outbox (type, key, state, last_error) VALUES ('pedido.criado', 'p-dead', 'dead', 'parked by the test')")
	var ownDead int64
	if err := pool.QueryRow(ctx, "SELECT id FROM "+schema+".outbox WHERE key = 'p-dead'").Scan(&ownDead); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"TEST_TOKEN": "tok-0123456789abcdef", "CONSOLE_TOKEN": "a-console-token-for-the-roles-test"}
	consoleCfg := writeFile(t, fmt.Sprintf("database: %s\nschema: %s\napp: pedidos\nroutes:\n  - type: pedido.criado\n    http: {url: %s, token: ${TEST_TOKEN}}\n"+
		"console:\n  token: ${CONSOLE_TOKEN}\n  all_apps: true\n", url("pedidos/console"), schema, inbox.url))
	cctx, stopConsole := context.WithCancel(ctx)
	defer stopConsole()
	var clog syncBuffer
	cdone := make(chan int, 1)
	go func() {
		cdone <- Run(cctx, []string{"console", "--config", consoleCfg, "--listen", "127.0.0.1:0", "--log-format", "json"},
			IO{Out: io.Discard, Err: &clog, Env: func(k string) (string, bool) { v, ok := env[k]; return v, ok }})
	}()
	var caddr string
	mensageriatest.Eventually(t, 20*time.Second, func() bool {
		select {
		case code := <-cdone:
			t.Fatalf("console exited %d: %s", code, clog.String())
		default:
		}
		if m := consoleAddr.FindStringSubmatch(clog.String()); m != nil {
			caddr = m[1]
		}
		return caddr != ""
	}, "the console to listen")
	call := func(method, path, csrf, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+caddr+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+env["CONSOLE_TOKEN"])
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-CSRF-Token", csrf)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := call("GET", "/api/session", "", "")
	var session struct{ CSRF string }
	if code != 200 || json.Unmarshal([]byte(body), &session) != nil {
		t.Fatalf("console session: %d %s", code, body)
	}
	code, body = call("GET", "/api/overview", "", "")
	if code != 200 || !strings.Contains(body, `"fatura.emitida"`) || !strings.Contains(body, `"pedido.criado"`) {
		t.Fatalf("the console does not show both apps: %d %s", code, body)
	}
	retried := func(id int64) int {
		t.Helper()
		code, body := call("POST", "/api/dead/retry", session.CSRF, fmt.Sprintf(`{"ids":[%d]}`, id))
		var res struct{ Changed int }
		if code != 200 || json.Unmarshal([]byte(body), &res) != nil {
			t.Fatalf("console retry of %d: %d %s", id, code, body)
		}
		return res.Changed
	}
	if n := retried(deadID); n != 0 {
		t.Fatalf("pedidos' console retried %d of faturamento's dead letters", n)
	}
	if n := retried(ownDead); n != 1 {
		t.Fatalf("pedidos' console retried %d of its own dead letter, want 1", n)
	}
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		return count("SELECT count(*) FROM "+schema+".inbox_queue WHERE consumer = 'fat' AND key = 'p-dead'") == 1
	}, "the retried message delivered")
	if count(fmt.Sprintf("SELECT count(*) FROM %s.outbox WHERE id = %d AND state = 'dead'", schema, deadID)) != 1 {
		t.Fatal("faturamento's dead letter moved")
	}
	stopConsole()
	<-cdone

	// Nothing of the other app was ever needed: no process hit a grant
	// or a policy while doing its own job.
	stopRelays()
	for _, p := range relays {
		if code := <-p.done; code != 0 {
			t.Fatalf("relay exit %d:\n%s", code, p.logs.String())
		}
	}
	if code := inbox.stop(t); code != 0 {
		t.Fatalf("receive exit %d:\n%s", code, inbox.logs.String())
	}
	for _, log := range []string{relays[0].logs.String(), relays[1].logs.String(), inbox.logs.String(), clog.String()} {
		if strings.Contains(log, "permission denied") || strings.Contains(log, "row-level security") {
			t.Fatalf("a process was refused doing its own job:\n%s", log)
		}
	}
	var catalog []string
	rows, _ := pool.Query(ctx, "SELECT kind || ' ' || name || ' ' || coalesce(app, '') FROM "+schema+".owners ORDER BY 1")
	catalog, _ = pgx.CollectRows(rows, pgx.RowTo[string])
	if got, want := strings.Join(catalog, ", "), "consumer fat faturamento, migrations schema pedidos, type fatura.emitida faturamento, type pedido.criado pedidos"; got != want {
		t.Fatalf("catalog %q, want %q", got, want)
	}
}

// A SQLite file has no roles: `migrate sql --grants` and
// `--row-level-security` say so and print nothing (docs/security.md says
// what protects the file instead).
func TestMigrateSQLGrantsRefusedOnSQLite(t *testing.T) {
	cfg := writeFile(t, fmt.Sprintf("database: sqlite:%s\napp: pedidos\nroutes:\n  - type: pedido.criado\n    http: {url: http://127.0.0.1:1/m2m, token: ${TEST_TOKEN}}\n",
		filepath.Join(t.TempDir(), "m.db")))
	for _, args := range [][]string{{"--grants", "relay", "--role", "r"}, {"--row-level-security"}} {
		res := run(t, "", tokEnv, append([]string{"migrate", "sql", "--config", cfg}, args...)...)
		must(t, "migrate sql "+strings.Join(args, " "), res, 2, "SQLite file has no roles")
		if res.out != "" {
			t.Fatalf("printed %q", res.out)
		}
	}
}
