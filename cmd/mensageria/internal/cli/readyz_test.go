package cli

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/internal/testdb"
)

// A relay that can deliver but cannot settle (its role may not DELETE
// from the outbox) turns /readyz unready, the body saying why; when the
// privilege comes back it is ready again and the backlog drains.
func TestRelayReadyzWhileSettlesFail(t *testing.T) {
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	ctx := context.Background()
	rcv := newReceiver(t)
	admin := appFile(t, schema, "pedidos", rcv.srv.URL+"/m2m", "pedido.criado")
	must(t, "migrate up", run(t, "", tokEnv, "migrate", "up", "--config", admin), 0)
	must(t, "owners register", run(t, "", tokEnv, "owners", "register", "--config", admin), 0)

	// A role of the test's own, dropped at its end; the server's
	// configuration is never touched.
	role := fmt.Sprintf("mensageria_relay_%08x", rand.Uint32())
	exec := func(q string) {
		t.Helper()
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("CREATE ROLE " + role + " LOGIN")
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	exec("GRANT USAGE ON SCHEMA " + schema + " TO " + role)
	exec("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema + " TO " + role)
	exec("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA " + schema + " TO " + role)
	exec("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA " + schema + " TO " + role)
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	relayCfg := writeFile(t, fmt.Sprintf("database: %s\nschema: %s\napp: pedidos\nroutes:\n  - type: pedido.criado\n    http: {url: %s, token: ${TEST_TOKEN}}\n"+
		"relay: {batch: 20, lease: 2s, poll_interval: 50ms, backoff_base: 10ms, backoff_max: 50ms}\n", u.String(), schema, rcv.srv.URL+"/m2m"))

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(rctx, []string{"relay", "--config", relayCfg, "--listen", "127.0.0.1:0", "--log-format", "json"},
			IO{Out: io.Discard, Err: &errb, Env: func(k string) (string, bool) { v, ok := tokEnv[k]; return v, ok }})
	}()
	addr := waitAddr(t, &errb, done)
	readyz := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("readyz of a running relay: %d %s", code, body)
	}

	exec("REVOKE DELETE ON " + schema + ".outbox FROM " + role)
	for i := range 40 {
		must(t, "enqueue", run(t, "", tokEnv, "enqueue", "-t", "pedido.criado", "-k", fmt.Sprint("k-", i), "--config", admin), 0)
	}
	var body string
	waitFor(t, "readyz to report the failing settles", 30*time.Second, func() bool {
		var code int
		code, body = readyz()
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "settle failing") || !strings.Contains(body, "permission denied") {
		t.Fatalf("readyz body %q does not say why", body)
	}

	exec("GRANT DELETE ON " + schema + ".outbox TO " + role)
	waitFor(t, "readyz ready again", 30*time.Second, func() bool { code, _ := readyz(); return code == http.StatusOK })
	waitFor(t, "the backlog drained", 30*time.Second, func() bool {
		var n int
		_ = pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".outbox").Scan(&n)
		return n == 0
	})
	if rcv.keys() != 40 {
		t.Fatalf("%d keys delivered, want 40", rcv.keys())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("relay exit %d:\n%s", code, errb.String())
	}
}
