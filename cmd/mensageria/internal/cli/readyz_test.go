package cli

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

// roleRelay is a relay of app pedidos run by the command as a role of the
// test's own (granted what a relay needs, dropped when the test ends; the
// server's configuration is never touched), with its /readyz, /metrics
// and the admin config that produces and inspects as the superuser.
type roleRelay struct {
	t      *testing.T
	pool   *pgxpool.Pool
	schema string
	role   string
	admin  string // config of the superuser
	rcv    *receiver
	addr   string
	errb   *syncBuffer
	cancel context.CancelFunc
	done   chan int
}

func startRoleRelay(t *testing.T) *roleRelay {
	t.Helper()
	r := &roleRelay{t: t, pool: testdb.Pool(t), schema: testdb.Schema(t), errb: &syncBuffer{}, done: make(chan int, 1)}
	r.rcv = newReceiver(t)
	r.admin = appFile(t, r.schema, "pedidos", r.rcv.srv.URL+"/m2m", "pedido.criado")
	must(t, "migrate up", run(t, "", tokEnv, "migrate", "up", "--config", r.admin), 0)
	must(t, "owners register", run(t, "", tokEnv, "owners", "register", "--config", r.admin), 0)

	r.role = fmt.Sprintf("mensageria_relay_%08x", rand.Uint32())
	r.exec("CREATE ROLE " + r.role + " LOGIN")
	t.Cleanup(func() {
		_, _ = r.pool.Exec(context.Background(), "DROP OWNED BY "+r.role)
		_, _ = r.pool.Exec(context.Background(), "DROP ROLE "+r.role)
	})
	r.exec("GRANT USAGE ON SCHEMA " + r.schema + " TO " + r.role)
	r.exec("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + r.schema + " TO " + r.role)
	r.exec("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA " + r.schema + " TO " + r.role)
	r.exec("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA " + r.schema + " TO " + r.role)
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(r.role)
	relayCfg := writeFile(t, fmt.Sprintf("database: %s\nschema: %s\napp: pedidos\nroutes:\n  - type: pedido.criado\n    http: {url: %s, token: ${TEST_TOKEN}}\n"+
		"relay: {batch: 20, lease: 2s, poll_interval: 50ms, backoff_base: 10ms, backoff_max: 50ms}\n", u.String(), r.schema, r.rcv.srv.URL+"/m2m"))

	rctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	t.Cleanup(cancel)
	go func() {
		r.done <- Run(rctx, []string{"relay", "--config", relayCfg, "--listen", "127.0.0.1:0", "--log-format", "json"},
			IO{Out: io.Discard, Err: r.errb, Env: func(k string) (string, bool) { v, ok := tokEnv[k]; return v, ok }})
	}()
	r.addr = waitAddr(t, r.errb, r.done)
	return r
}

func (r *roleRelay) exec(q string) {
	r.t.Helper()
	if _, err := r.pool.Exec(context.Background(), q); err != nil {
		r.t.Fatalf("%s: %v", q, err)
	}
}

// get answers GET path of the relay's health server.
func (r *roleRelay) get(path string) (int, string) {
	r.t.Helper()
	resp, err := http.Get("http://" + r.addr + path)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (r *roleRelay) readyz() (int, string) { return r.get("/readyz") }

// unready waits for /readyz to answer 503 and checks its body says each
// of why.
func (r *roleRelay) unready(what string, why ...string) {
	r.t.Helper()
	var body string
	mensageriatest.Eventually(r.t, 30*time.Second, func() bool {
		var code int
		code, body = r.readyz()
		return code == http.StatusServiceUnavailable
	}, "readyz to report "+what)
	for _, w := range why {
		if !strings.Contains(body, w) {
			r.t.Fatalf("readyz body %q does not say %q", body, w)
		}
	}
}

// readyAgain waits for /readyz to answer 200.
func (r *roleRelay) readyAgain() {
	r.t.Helper()
	mensageriatest.Eventually(r.t, 30*time.Second, func() bool { code, _ := r.readyz(); return code == http.StatusOK }, "readyz ready again")
}

// enqueue writes n messages of pedido.criado as the superuser.
func (r *roleRelay) enqueue(n int) {
	r.t.Helper()
	for i := range n {
		must(r.t, "enqueue", run(r.t, "", tokEnv, "enqueue", "-t", "pedido.criado", "-k", fmt.Sprint("k-", i), "--config", r.admin), 0)
	}
}

// drained waits for the outbox to empty and checks what arrived.
func (r *roleRelay) drained(want int) {
	r.t.Helper()
	mensageriatest.Eventually(r.t, 30*time.Second, func() bool {
		var n int
		_ = r.pool.QueryRow(context.Background(), "SELECT count(*) FROM "+r.schema+".outbox").Scan(&n)
		return n == 0
	}, "the backlog drained")
	if r.rcv.keys() != want {
		r.t.Fatalf("%d keys delivered, want %d", r.rcv.keys(), want)
	}
}

// stop ends the relay and checks it exited cleanly.
func (r *roleRelay) stop() {
	r.t.Helper()
	r.cancel()
	if code := <-r.done; code != 0 {
		r.t.Fatalf("relay exit %d:\n%s", code, r.errb.String())
	}
}

// failures reads mensageria_relay_failures_total of kind from /metrics.
func (r *roleRelay) failures(kind string) float64 {
	r.t.Helper()
	_, body := r.get("/metrics")
	prefix := `mensageria_relay_failures_total{app="pedidos",kind="` + kind + `"} `
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				r.t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	r.t.Fatalf("/metrics has no %s series", prefix)
	return 0
}

// A relay that can deliver but cannot settle (its role may not DELETE
// from the outbox) turns /readyz unready, the body saying why; when the
// privilege comes back it is ready again and the backlog drains.
func TestRelayReadyzWhileSettlesFail(t *testing.T) {
	r := startRoleRelay(t)
	if code, body := r.readyz(); code != http.StatusOK {
		t.Fatalf("readyz of a running relay: %d %s", code, body)
	}
	r.exec("REVOKE DELETE ON " + r.schema + ".outbox FROM " + r.role)
	r.enqueue(40)
	r.unready("the failing settles", "settle failing", "permission denied")
	if n := r.failures("settle"); n == 0 {
		t.Fatal("no settle failure counted on /metrics")
	}
	r.exec("GRANT DELETE ON " + r.schema + ".outbox TO " + r.role)
	r.readyAgain()
	r.drained(40)
	r.stop()
}

// A relay whose claims fail (its role may not UPDATE the outbox) used to
// stay ready while it delivered nothing, with no metric counting it. Now
// /readyz is unready saying why, /metrics counts each failed claim, the
// streak is logged once (not once a claim, every poll interval), and
// 'mensageria status' shows what the leader says of itself; with the
// privilege back the relay is ready and the backlog drains.
func TestRelayReadyzWhileClaimsFail(t *testing.T) {
	r := startRoleRelay(t)
	if code, body := r.readyz(); code != http.StatusOK {
		t.Fatalf("readyz of a running relay: %d %s", code, body)
	}
	r.exec("REVOKE UPDATE ON " + r.schema + ".outbox FROM " + r.role)
	r.enqueue(10)
	r.unready("the failing claims", "claim failing", "permission denied")
	// Twenty claims at a 50 ms poll interval: a second of failures.
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return r.failures("claim") >= 20 }, "twenty failed claims on /metrics")
	if n := strings.Count(r.errb.String(), "claim failing on a database error"); n != 1 {
		t.Fatalf("the failing claims were logged %d times, want once:\n%s", n, r.errb.String())
	}
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		res := run(t, "", tokEnv, "status", "--config", r.admin)
		return strings.Contains(res.out, "the leader reports it is not ready: claim failing")
	}, "status to show the leader's health")
	if r.rcv.keys() != 0 {
		t.Fatalf("%d keys delivered while claims failed", r.rcv.keys())
	}

	r.exec("GRANT UPDATE ON " + r.schema + ".outbox TO " + r.role)
	r.readyAgain()
	r.drained(10)
	r.stop()
}

// A role that may only connect, with no grant on the schema, takes the
// advisory lock every relay of the app elected with before ADR 0025; the
// relay leads and delivers all the same, and 'mensageria status' names
// the relay that holds the election and the session that is not one.
func TestRelayElectionOutsiderCannotStandItBy(t *testing.T) {
	pool := testdb.Pool(t)
	ctx := context.Background()
	outsider := fmt.Sprintf("mensageria_outsider_%08x", rand.Uint32())
	if _, err := pool.Exec(ctx, "CREATE ROLE "+outsider+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP ROLE "+outsider) })
	schema := testdb.Schema(t)
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(outsider)
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	// The key as earlier versions computed it: public names only.
	h := fnv.New64a()
	h.Write([]byte("mensageria\x00relay\x00pedidos\x00" + schema))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(h.Sum64())); err != nil {
		t.Fatal(err)
	}

	rcv := newReceiver(t)
	cfg := appFile(t, schema, "pedidos", rcv.srv.URL+"/m2m", "pedido.criado")
	must(t, "migrate up", run(t, "", tokEnv, "migrate", "up", "--config", cfg), 0)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(rctx, []string{"relay", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json"},
			IO{Out: io.Discard, Err: &errb, Env: func(k string) (string, bool) { v, ok := tokEnv[k]; return v, ok }})
	}()
	waitAddr(t, &errb, done)
	for i := range 5 {
		must(t, "enqueue", run(t, "", tokEnv, "enqueue", "-t", "pedido.criado", "-k", fmt.Sprint("k-", i), "--config", cfg), 0)
	}
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return rcv.keys() == 5 }, "the relay delivers")
	res := run(t, "", tokEnv, "status", "--config", cfg)
	if !strings.Contains(res.out, "election: leader, held by ") || !strings.Contains(res.out, "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("status does not name the relay that holds the election:\n%s", res.out)
	}
	if !strings.Contains(res.out, outsider) || !strings.Contains(res.out, "not a relay") {
		t.Fatalf("status does not name the session that is not a relay:\n%s", res.out)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay exit %d:\n%s", code, errb.String())
	}
}
