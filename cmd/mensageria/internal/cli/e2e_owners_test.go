package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

// appFile writes the config of one app on a PostgreSQL schema, routing
// types to url.
func appFile(t *testing.T, schema, app, url string, types ...string) string {
	t.Helper()
	var routes strings.Builder
	for _, typ := range types {
		fmt.Fprintf(&routes, "  - type: %s\n    http: {url: %s, token: ${TEST_TOKEN}, timeout: 1500ms}\n", typ, url)
	}
	return writeFile(t, fmt.Sprintf("database: %s\nschema: %s\napp: %s\nroutes:\n%s"+
		"relay: {batch: 50, concurrency: 8, lease: 2s, max_attempts: 3, poll_interval: 50ms, backoff_base: 10ms, backoff_max: 50ms}\n",
		testdb.URL(), schema, app, routes.String()))
}

// stopProc ends a relay with SIGTERM and wants a clean exit.
func stopProc(t *testing.T, p *proc) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case code := <-p.done:
		if code != 0 {
			t.Fatalf("relay exit %d:\n%s", code, p.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("relay ignored SIGTERM:\n%s", p.stderr.String())
	}
}

// psql runs one statement with the psql binary, as a user of another
// language would enqueue; it is required under CI.
func psql(t *testing.T, statement string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("psql")
	if err != nil {
		testdb.Unavailable(t, "the psql binary", err)
	}
	out, err := exec.Command(bin, testdb.URL(), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-c", statement).CombinedOutput()
	return string(out), err
}

// A plain INSERT from psql: of a type no app owns it fails with the
// catalog's message and writes nothing; after 'owners register' (the
// documented first step of an app that enqueues by SQL before its relay
// ever ran) the same INSERT succeeds, and the relay delivers it.
func TestEndToEndPlainSQLInsert(t *testing.T) {
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	bin := binary(t)
	rcv := newReceiver(t)
	p := appFile(t, schema, "pedidos", rcv.srv.URL+"/m2m", "pedido.criado")
	env := []string{"TEST_TOKEN=tok"}
	c := func(args ...string) result {
		t.Helper()
		return runBin(t, bin, env, "", append(args, "--config", p)...)
	}
	must(t, "migrate up", c("migrate", "up"), 0)
	insert := fmt.Sprintf(`INSERT INTO %s.outbox (type, key, payload) VALUES ('pedido.criado', 'psql-1', '{"from":"psql"}')`, schema)
	out, err := psql(t, insert)
	if err == nil {
		t.Fatalf("psql INSERT of a type no app owns succeeded: %s", out)
	}
	for _, want := range []string{`message type "pedido.criado" has no owner app in schema ` + schema, "mensageria owners register", "nothing was enqueued"} {
		if !strings.Contains(out, want) {
			t.Fatalf("psql's error lacks %q:\n%s", want, out)
		}
	}
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".outbox").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows after a refused INSERT (%v)", n, err)
	}

	must(t, "owners register", c("owners", "register"), 0, "app pedidos owns 1 message type(s)")
	if out, err := psql(t, insert); err != nil {
		t.Fatalf("psql INSERT of an owned type: %v\n%s", err, out)
	}
	relay := startProc(t, bin, env, "relay", "--config", p, "--listen", "127.0.0.1:0", "--log-format", "json")
	waitAddr(t, relay.stderr, relay.done)
	mensageriatest.Eventually(t, 20*time.Second, func() bool { return rcv.count("psql-1") == 1 }, "the psql row delivered")
	stopProc(t, relay)
}

// Three apps on one schema. A third app whose config routes a type of
// another fails at relay start with exit 2, naming both apps and the type,
// and claims nothing; dead letters of one app cannot be listed, retried or
// discarded under another.
func TestEndToEndOwnershipAcrossApps(t *testing.T) {
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	bin := binary(t)
	rcv := newReceiver(t)
	url := rcv.srv.URL + "/m2m"
	pedidos := appFile(t, schema, "pedidos", url, "pedido.criado")
	faturamento := appFile(t, schema, "faturamento", url, "fatura.emitida")
	relatorios := appFile(t, schema, "relatorios", url, "relatorio.pronto", "pedido.criado")
	env := []string{"TEST_TOKEN=tok"}
	as := func(cfg string, stdin string, args ...string) result {
		t.Helper()
		return runBin(t, bin, env, stdin, append(args, "--config", cfg)...)
	}
	ctx := context.Background()
	must(t, "migrate up", as(pedidos, "", "migrate", "up"), 0)
	must(t, "register pedidos", as(pedidos, "", "owners", "register"), 0)
	must(t, "register faturamento", as(faturamento, "", "owners", "register"), 0)
	for i := range 50 {
		must(t, "enqueue", as(pedidos, "", "enqueue", "-t", "pedido.criado", "-k", fmt.Sprint("p-", i)), 0)
	}
	for _, k := range []string{"refuse-p1", "refuse-p2"} {
		must(t, "enqueue", as(pedidos, "", "enqueue", "-t", "pedido.criado", "-k", k), 0)
	}
	for _, k := range []string{"f-1", "refuse-f1", "refuse-f2"} {
		must(t, "enqueue", as(faturamento, "", "enqueue", "-t", "fatura.emitida", "-k", k), 0)
	}
	catalog := func() []string {
		t.Helper()
		return entryKeys(catalogOf(t, func(stdin string, args ...string) result { return as(pedidos, stdin, args...) }))
	}
	before := catalog()

	// The copy-pasted config: its relay stops before serving or claiming.
	r := as(relatorios, "", "relay", "--listen", "127.0.0.1:0", "--log-format", "json")
	must(t, "the third app's relay", r, ExitUsage,
		`app "relatorios" cannot start its relay`, `message type "pedido.criado" is owned by app "pedidos"`, "nothing was claimed")
	if strings.Contains(r.err, "serving health and metrics") {
		t.Fatalf("the refused relay served:\n%s", r.err)
	}
	if after := catalog(); !slices.Equal(after, before) {
		t.Fatalf("the refused relay changed the catalog: %v -> %v", before, after)
	}
	var touched int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".outbox WHERE attempts > 0 OR lease_token IS NOT NULL OR state <> 'pending'").Scan(&touched); err != nil || touched != 0 {
		t.Fatalf("%d rows touched by the refused relay (%v)", touched, err)
	}

	// The owners' relays deliver their own, and park the refusals dead
	// with the route that answered.
	rp := startProc(t, bin, env, "relay", "--config", pedidos, "--listen", "127.0.0.1:0", "--log-format", "json")
	rf := startProc(t, bin, env, "relay", "--config", faturamento, "--listen", "127.0.0.1:0", "--log-format", "json")
	waitAddr(t, rp.stderr, rp.done)
	waitAddr(t, rf.stderr, rf.done)
	waitDrained(t, pool, schema, "every row settled", 30*time.Second)
	stopProc(t, rp)
	stopProc(t, rf)
	if rcv.keys() != 51 {
		t.Fatalf("%d keys delivered, want 51", rcv.keys())
	}

	deadOf := func(cfg string, args ...string) []DeadMessage {
		t.Helper()
		r := as(cfg, "", append([]string{"dead", "list", "--json"}, args...)...)
		var out DeadPage
		if err := json.Unmarshal([]byte(r.out), &out); err != nil || r.code != 0 {
			t.Fatalf("dead list: %v %+v", err, r)
		}
		return out.Messages
	}
	ours, theirs := deadOf(pedidos), deadOf(faturamento)
	if len(ours) != 2 || len(theirs) != 2 {
		t.Fatalf("dead letters: pedidos %+v, faturamento %+v", ours, theirs)
	}
	for _, d := range ours {
		if d.Type != "pedido.criado" || d.Owner != "pedidos" || !strings.HasPrefix(d.LastRoute, "pedidos") || !strings.Contains(d.LastRoute, rcv.srv.URL) {
			t.Fatalf("pedidos's dead letter %+v", d)
		}
	}
	if all := deadOf(pedidos, "--all-apps"); len(all) != 4 {
		t.Fatalf("dead list --all-apps: %d rows", len(all))
	}
	id := fmt.Sprint(theirs[0].ID)
	for _, args := range [][]string{{"dead", "show", id}, {"dead", "retry", id}, {"dead", "discard", "--yes", id}, {"dead", "retry", "--yes", "--type", "fatura.emitida"}} {
		must(t, strings.Join(args, " ")+" under pedidos", as(pedidos, "", args...), ExitUsage, `owned by app "faturamento"`, "nothing changed")
	}
	if again := deadOf(faturamento); len(again) != 2 {
		t.Fatalf("faturamento's dead letters after pedidos's refused commands: %+v", again)
	}
	must(t, "dead discard of pedidos's own", as(pedidos, "", "dead", "discard", "--yes", "--type", "pedido.criado"), 0, "2 dead message(s) deleted")
	if again := deadOf(faturamento); len(again) != 2 {
		t.Fatalf("faturamento's dead letters after pedidos discarded its own: %+v", again)
	}
}

// oldRelease is the last build whose schema is version 1.
const oldRelease = "cdae648"

// buildOldRelease builds the command of oldRelease from this repository's
// history into a temporary directory (the module cache is shared, so it
// downloads nothing). A checkout without that history skips, except under
// CI, where it fails.
func buildOldRelease(t *testing.T) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		testdb.Unavailable(t, "the git history of this repository", err)
	}
	repo := strings.TrimSpace(string(top))
	if out, err := exec.Command("git", "-C", repo, "cat-file", "-e", oldRelease+"^{commit}").CombinedOutput(); err != nil {
		testdb.Unavailable(t, "commit "+oldRelease+" (a full clone's history)", fmt.Errorf("%v %s", err, out))
	}
	src := t.TempDir()
	tarball := filepath.Join(t.TempDir(), oldRelease+".tar")
	if out, err := exec.Command("git", "-C", repo, "archive", "--format=tar", "-o", tarball, oldRelease).CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v %s", oldRelease, err, out)
	}
	if out, err := exec.Command("tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
		t.Fatalf("untar %s: %v %s", oldRelease, err, out)
	}
	bin := filepath.Join(t.TempDir(), "mensageria-"+oldRelease)
	build := exec.Command("go", "build", "-o", bin, "./cmd/mensageria")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of %s: %v\n%s", oldRelease, err, out)
	}
	return bin
}

// The upgrade of a populated version-1 outbox with its relay running: the
// previous release relays app pedidos on a v1 schema; meanwhile this build
// migrates the schema up (as pedidos, the migrations' owner) and a relay of
// app faturamento of this build starts beside the old one. The old build
// keeps enqueueing pedidos's type (left unclaimed by the migration), the
// old relay keeps delivering it, and finally this build's relay of pedidos
// takes the type over. Every row reaches the receiver, none is dead.
func TestEndToEndUpgradeFromV1(t *testing.T) {
	testdb.Long(t, "upgrade from v1")
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	old := buildOldRelease(t)
	bin := binary(t)
	rcv := newReceiver(t)
	rcv.delay = 5 * time.Millisecond
	url := rcv.srv.URL + "/m2m"
	pedidos := appFile(t, schema, "pedidos", url, "pedido.criado")
	faturamento := appFile(t, schema, "faturamento", url, "fatura.emitida")
	env := []string{"TEST_TOKEN=tok"}
	ctx := context.Background()

	must(t, "old migrate up", runBin(t, old, env, "", "migrate", "up", "--config", pedidos), 0)
	var ids []string
	fill := func(typ, prefix string, n int) {
		t.Helper()
		rows, err := pool.Query(ctx, fmt.Sprintf(`INSERT INTO %s.outbox (type, key, payload)
			SELECT $1, $2 || g, '{}' FROM generate_series(1, $3) g RETURNING message_id::text`, schema), typ, prefix, n)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	enqueueWith := func(bin, cfg, typ, key string) {
		t.Helper()
		r := runBin(t, bin, env, "", "enqueue", "-t", typ, "-k", key, "--json", "--config", cfg)
		var out struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(r.out), &out); err != nil || r.code != 0 || out.ID == "" {
			t.Fatalf("enqueue %s with %s: %v %+v", key, bin, err, r)
		}
		ids = append(ids, out.ID)
	}
	// A populated v1 outbox: both apps' types, the other app's relay not
	// yet running.
	const backlog = 6000
	fill("pedido.criado", "v1-p-", backlog)
	fill("fatura.emitida", "v1-f-", 500)

	oldRelay := startProc(t, old, env, "relay", "--config", pedidos, "--listen", "127.0.0.1:0", "--log-format", "json")
	waitAddr(t, oldRelay.stderr, oldRelay.done)
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return rcv.keys() >= 200 }, "the old relay under way")

	r := runBin(t, bin, env, "", "migrate", "up", "--json", "--config", pedidos)
	must(t, "migrate up while the old relay runs", r, 0, `"from":1`, `"applied":[2`, `"owner":"pedidos"`)
	if rcv.keys() >= backlog {
		t.Fatalf("the old relay had drained the backlog (%d) before the migration: the test needs it mid-way", rcv.keys())
	}
	must(t, "this build's check after the migration", runBin(t, bin, env, "", "migrate", "check", "--config", faturamento), 0, "current")

	// The old build's producer still enqueues pedidos's unclaimed type,
	// and a plain INSERT of it is still accepted.
	for i := range 5 {
		enqueueWith(old, pedidos, "pedido.criado", fmt.Sprint("old-after-", i))
	}
	fill("pedido.criado", "sql-after-", 100)

	// faturamento's rows wait, untouched and unclaimed, for their owner.
	var touched int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".outbox WHERE type = 'fatura.emitida' AND (attempts > 0 OR state <> 'pending')").Scan(&touched); err != nil || touched != 0 {
		t.Fatalf("%d of faturamento's rows touched before its relay ran (%v)", touched, err)
	}
	seeded := catalogOf(t, func(stdin string, args ...string) result {
		return runBin(t, bin, env, stdin, append(args, "--config", faturamento)...)
	})
	for _, typ := range []string{"pedido.criado", "fatura.emitida"} {
		if app, ok := ownerOf(seeded, "type", typ); !ok || app != "" {
			t.Fatalf("type %s after the migration: owner %q (in the catalog: %v), want unclaimed", typ, app, ok)
		}
	}

	newFat := startProc(t, bin, env, "relay", "--config", faturamento, "--listen", "127.0.0.1:0", "--log-format", "json")
	waitAddr(t, newFat.stderr, newFat.done)
	enqueueWith(bin, faturamento, "fatura.emitida", "new-f-1")
	mensageriatest.Eventually(t, 60*time.Second, func() bool {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".outbox WHERE type = 'fatura.emitida' AND state = 'pending'").Scan(&n)
		return n == 0
	}, "faturamento's rows delivered by this build")
	select {
	case code := <-oldRelay.done:
		t.Fatalf("the old relay exited %d on the migrated schema:\n%s", code, oldRelay.stderr.String())
	default:
	}

	// The old relay goes; this build's relay of pedidos takes the type
	// over and drains whatever is left.
	stopProc(t, oldRelay)
	for i := range 3 {
		enqueueWith(old, pedidos, "pedido.criado", fmt.Sprint("old-between-", i))
	}
	newPed := startProc(t, bin, env, "relay", "--config", pedidos, "--listen", "127.0.0.1:0", "--log-format", "json")
	waitAddr(t, newPed.stderr, newPed.done)
	enqueueWith(bin, pedidos, "pedido.criado", "new-p-1")
	mensageriatest.Eventually(t, 90*time.Second, func() bool {
		rcv.mu.Lock()
		defer rcv.mu.Unlock()
		for _, id := range ids {
			if rcv.ids[id] == 0 {
				return false
			}
		}
		return true
	}, "every row delivered")
	stopProc(t, newPed)
	stopProc(t, newFat)

	var dead, pending int
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE state = 'dead'), count(*) FILTER (WHERE state = 'pending') FROM "+schema+".outbox").Scan(&dead, &pending); err != nil {
		t.Fatal(err)
	}
	if dead != 0 || pending != 0 {
		t.Fatalf("%d dead and %d pending rows after the upgrade", dead, pending)
	}
	owners := catalogOf(t, func(stdin string, args ...string) result {
		return runBin(t, bin, env, stdin, append(args, "--config", pedidos)...)
	})
	for typ, app := range map[string]string{"pedido.criado": "pedidos", "fatura.emitida": "faturamento"} {
		if got, _ := ownerOf(owners, "type", typ); got != app {
			t.Errorf("type %s owned by %q after the upgrade, want %q", typ, got, app)
		}
	}
	rcv.mu.Lock()
	redelivered := 0
	for _, n := range rcv.ids {
		redelivered += n - 1
	}
	rcv.mu.Unlock()
	t.Logf("%d rows delivered across the upgrade, %d redeliveries", len(ids), redelivered)
}
