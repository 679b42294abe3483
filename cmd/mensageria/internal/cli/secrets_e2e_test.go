package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

// TestNoSecretAnywhere plants a gateway key in the query string of every
// route URL (and of a reconcile probe's, and of the OTLP endpoint), and a
// password in the database URL's user-info, drives every kind of failure
// (a refused connection, a timeout, a 502 whose page echoes the request,
// a 422 whose problem quotes it, a redirect whose Location repeats it, an
// at-most-once route whose probe fails, a batch route, a TLS handshake
// refused at start, an unreachable and an unparsable database), and looks
// for the secrets everywhere the product writes: the relay's and the
// console's logs, every command's output (status, explain, dead, doubt,
// and what a failing command prints), the /readyz body and /metrics, the
// console's API, and every row of every table of the schema (SQLite:
// every byte of the database files). PostgreSQL and SQLite.
func TestNoSecretAnywhere(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		noSecretAnywhere(t, func(string) (string, func() string) {
			path := filepath.Join(t.TempDir(), "m.db")
			return "sqlite:" + path, func() string {
				var all strings.Builder
				for _, f := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
					b, err := os.ReadFile(f)
					if err == nil {
						all.Write(b)
					}
				}
				return all.String()
			}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		pool := testdb.Pool(t)
		schema := testdb.Schema(t)
		noSecretAnywhere(t, func(password string) (string, func() string) {
			u, err := url.Parse(testdb.URL())
			if err != nil {
				t.Fatal(err)
			}
			if _, set := u.User.Password(); !set {
				// The test server trusts its clients: any password
				// connects, and this one must show nowhere.
				u.User = url.UserPassword(u.User.Username(), password)
			}
			q := u.Query()
			q.Set("application_name", "mensageria-"+password)
			u.RawQuery = q.Encode()
			return u.String() + "\nschema: " + schema, func() string {
				ctx := context.Background()
				rows, err := pool.Query(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema)
				if err != nil {
					t.Fatal(err)
				}
				tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil || len(tables) < 5 {
					t.Fatalf("tables of %s: %v %v", schema, tables, err)
				}
				var all strings.Builder
				for _, tb := range tables {
					var text *string
					if err := pool.QueryRow(ctx, fmt.Sprintf("SELECT string_agg(t::text, E'\\n') FROM %s.%s t", schema, pgx.Identifier{tb}.Sanitize())).Scan(&text); err != nil {
						t.Fatalf("%s: %v", tb, err)
					}
					if text != nil {
						all.WriteString(tb + ": " + *text + "\n")
					}
				}
				return all.String()
			}
		})
	})
}

func noSecretAnywhere(t *testing.T, database func(password string) (db string, dump func() string)) {
	n := rand.Uint32()
	key := fmt.Sprintf("gwK3y%08x", n)  // in every route URL's query string
	dbPW := fmt.Sprintf("dbPw%08xq", n) // in the database URL's user-info
	secrets := []string{key, dbPW}

	// One receiver that fails every way a gateway can, echoing the
	// request (query string and all) where a careless one would.
	probes := make(chan struct{}, 64)
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		full := "http://" + r.Host + r.URL.String()
		switch {
		case strings.HasPrefix(r.URL.Path, "/gateway"):
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			_, _ = fmt.Fprintf(w, "<h1>502</h1> upstream failed for %s (%s, key %s)", full, r.URL.RequestURI(), r.URL.Query().Get("api_key"))
		case strings.HasPrefix(r.URL.Path, "/refuse"):
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": "Refused at " + r.URL.RequestURI(), "status": 422, "detail": "posted to " + full})
		case strings.HasPrefix(r.URL.Path, "/redirect"):
			w.Header().Set("Location", full+"&moved=1")
			w.WriteHeader(http.StatusTemporaryRedirect)
		case strings.HasPrefix(r.URL.Path, "/slow"):
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		case strings.HasPrefix(r.URL.Path, "/probe"):
			select {
			case probes <- struct{}{}:
			default:
			}
			http.Error(w, "probe of "+full+" failed", http.StatusInternalServerError)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(echo.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	q := "?api_key=" + key + "&region=eu"

	db, dump := database(dbPW)
	consoleToken := "console-token-" + key[:4] + "-0123456789"
	cfg := writeFile(t, fmt.Sprintf(`database: %[1]s
app: segredos
routes:
  - type: s.closed
    http: {url: "http://%[2]s/m2m%[3]s", token: tok}
  - type: s.gateway
    http: {url: "%[4]s/gateway%[3]s", token: tok}
  - type: s.batch
    http: {url: "%[4]s/gateway/batch%[3]s", token: tok, batch: true}
  - type: s.refused
    http: {url: "%[4]s/refuse%[3]s", token: tok}
  - type: s.redirect
    http: {url: "%[4]s/redirect%[3]s", token: tok}
  - type: s.slow
    http: {url: "%[4]s/slow%[3]s", token: tok, timeout: 300ms}
  - type: s.once
    delivery: at_most_once
    http:
      url: "%[4]s/gateway/once%[3]s"
      token: tok
      reconcile: {url: "%[4]s/probe/{key}%[3]s"}
relay: {batch: 10, lease: 2s, max_attempts: 3, poll_interval: 50ms, backoff_base: 10ms, backoff_max: 100ms, route_failure_threshold: 2, route_pause: 200ms, route_pause_max: 400ms, reconcile_interval: 100ms}
console:
  token: ${CONSOLE_TOKEN}
`, db, closed, q, echo.URL))
	env := map[string]string{"CONSOLE_TOKEN": consoleToken}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	// Everything the product printed, to search at the end.
	var seen strings.Builder
	c := func(stdin string, args ...string) result {
		t.Helper()
		r := run(t, stdin, env, append(args, "--config", cfg)...)
		fmt.Fprintf(&seen, "\n$ mensageria %s\n%s\n%s", strings.Join(args, " "), r.out, r.err)
		return r
	}
	must(t, "migrate up", c("", "migrate", "up"), 0)
	must(t, "owners register", c("", "owners", "register"), 0)
	types := []string{"s.closed", "s.gateway", "s.batch", "s.refused", "s.redirect", "s.slow", "s.once"}
	for _, ty := range types {
		must(t, "enqueue "+ty, c("", "enqueue", "-t", ty, "-k", ty+"-1", "-p", `{"n":1}`), 0)
	}

	// The OTLP endpoint may carry a key too (the exporter reads the
	// process's environment; the command's log line, its IO's).
	otlp := "http://" + closed + "/v1/traces?key=" + key
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", otlp)
	env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = otlp

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var relayLog, consoleLog syncBuffer
	relayDone := make(chan int, 1)
	go func() {
		relayDone <- Run(ctx, []string{"relay", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json", "--trace"}, IO{Out: io.Discard, Err: &relayLog, Env: lookup})
	}()
	addr := waitAddr(t, &relayLog, relayDone)
	consoleDone := make(chan int, 1)
	go func() {
		consoleDone <- Run(ctx, []string{"console", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json"}, IO{Out: io.Discard, Err: &consoleLog, Env: lookup})
	}()
	var consoleAt string
	mensageriatest.Eventually(t, 20*time.Second, func() bool {
		if m := consoleAddr.FindStringSubmatch(consoleLog.String()); m != nil {
			consoleAt = m[1]
		}
		return consoleAt != ""
	}, "the console to listen")

	// Every failure has been met and recorded: the refusals are dead,
	// the destinations that failed are paused with their last error, the
	// at-most-once message is in doubt and its probe failed.
	mensageriatest.Eventually(t, 60*time.Second, func() bool {
		st := status(t, c)
		for _, ty := range []string{"s.refused", "s.redirect"} {
			if st.typ(ty).Dead != 1 {
				return false
			}
		}
		for _, ty := range []string{"s.closed", "s.gateway", "s.batch", "s.slow"} {
			if r := st.typ(ty).Route; r == nil || r.State == "flowing" || r.LastError == "" {
				return false
			}
		}
		return len(probes) > 0 && strings.Contains(relayLog.String(), "route paused")
	}, "every failure recorded")

	get := func(base, path, auth string) string {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+base+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		fmt.Fprintf(&seen, "\nGET %s -> %d\n%s", path, res.StatusCode, b)
		return string(b)
	}
	if body := get(addr, "/readyz", ""); !strings.Contains(body, "s.gateway") || !strings.Contains(body, "?…") {
		t.Errorf("/readyz names the paused routes and their errors, masked: %s", body)
	}
	if body := get(addr, "/metrics", ""); !strings.Contains(body, "mensageria_route_state") {
		t.Errorf("/metrics: %s", body)
	}
	bearer := "Bearer " + consoleToken
	get(consoleAt, "/api/overview", bearer)
	for _, ty := range []string{"s.refused", "s.redirect"} {
		var page struct {
			Letters []struct {
				ID int64 `json:"id"`
			} `json:"letters"`
		}
		if err := json.Unmarshal([]byte(get(consoleAt, "/api/dead?type="+ty, bearer)), &page); err != nil || len(page.Letters) != 1 {
			t.Fatalf("console dead of %s: %v %+v", ty, err, page)
		}
		get(consoleAt, fmt.Sprintf("/api/messages/%d", page.Letters[0].ID), bearer)
	}
	get(consoleAt, "/api/doubt?type=s.once", bearer)

	c("", "status")
	c("", "status", "--json")
	c("", "explain")
	c("", "explain", "--json")
	r := c("", "dead", "list", "--json")
	var deadPage DeadPage
	if err := json.Unmarshal([]byte(r.out), &deadPage); err != nil || len(deadPage.Messages) != 2 {
		t.Fatalf("dead list: %v %+v", err, r)
	}
	deadRows := deadPage.Messages
	if !strings.Contains(r.out, "posted to") || !strings.Contains(r.out, "redirect not followed") {
		t.Errorf("the dead rows keep their reasons: %s", r.out)
	}
	c("", "dead", "list")
	for _, d := range deadRows {
		c("", "dead", "show", fmt.Sprint(d.ID))
	}
	c("", "doubt", "list")
	c("", "doubt", "list", "--json")

	cancel()
	for name, done := range map[string]chan int{"relay": relayDone, "console": consoleDone} {
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("%s did not stop", name)
		}
	}

	// What the command prints when it fails: a TLS handshake refused at
	// start, a route URL with user-info (refused), one that does not
	// parse, an unreachable database and one whose URL pgx cannot parse.
	tlsSrv := httptest.NewTLSServer(http.NotFoundHandler())
	t.Cleanup(tlsSrv.Close)
	bad := func(what, database, route string) {
		t.Helper()
		p := writeFile(t, fmt.Sprintf("database: %s\napp: segredos\nroutes:\n  - type: s.closed\n    http: {url: %q, token: tok}\n", database, route))
		for _, args := range [][]string{{"relay", "--listen", ""}, {"explain"}, {"status"}} {
			r := run(t, "", env, append(args, "--config", p)...)
			fmt.Fprintf(&seen, "\n$ mensageria %s (%s)\n%s\n%s", strings.Join(args, " "), what, r.out, r.err)
			if r.code == 0 && args[0] == "relay" {
				t.Errorf("%s: the relay started", what)
			}
		}
	}
	good := strings.SplitN(db, "\n", 2)[0]
	bad("TLS refused", good, tlsSrv.URL+"/m2m"+q)
	bad("user-info in the route URL", good, "https://user:"+key+"@"+closed+"/m2m")
	bad("unparsable route URL", good, "http://user:"+key+" x@"+closed+"/m2m%zz"+q)
	bad("database unreachable", "postgres://postgres:"+dbPW+"@"+closed+"/test?connect_timeout=1&application_name="+key, "http://"+closed+"/m2m")
	bad("database URL pgx refuses", "postgres://postgres:"+dbPW+"@"+closed+"/test?sslmode=bogus&password="+dbPW, "http://"+closed+"/m2m")
	bad("libpq key/value database", "host=db password="+dbPW, "http://"+closed+"/m2m")

	for where, text := range map[string]string{
		"the relay's log":       relayLog.String(),
		"the console's log":     consoleLog.String(),
		"the commands' outputs": seen.String(),
		"the database":          dump(),
	} {
		for _, s := range secrets {
			if i := strings.Index(text, s); i >= 0 {
				t.Errorf("%s shows a secret: …%s…", where, text[max(0, i-300):min(len(text), i+100)])
			}
		}
	}
	// The masked forms are there: the search looked at the right texts.
	for where, want := range map[string]string{
		"the relay's log":       "/gateway?…",
		"the commands' outputs": "connection refused",
		"the database":          "?…",
	} {
		text := map[string]string{"the relay's log": relayLog.String(), "the commands' outputs": seen.String(), "the database": dump()}[where]
		if !strings.Contains(text, want) {
			t.Errorf("%s lacks %q", where, want)
		}
	}
}

// TestOlderRowsShowNoSecret: a reason stored before the relay masked its
// reasons (written here by SQL) still quotes a route URL's key and a
// password; `dead list`, `dead show` and `status` show neither.
func TestOlderRowsShowNoSecret(t *testing.T) {
	const secret = "0ldS3cr3tK3y"
	path := filepath.Join(t.TempDir(), "m.db")
	p := writeConfig(t, "sqlite:"+path, "mensageria", "http://127.0.0.1:1/m2m")
	c := func(args ...string) result {
		t.Helper()
		return run(t, "", tokEnv, append(args, "--config", p)...)
	}
	must(t, "migrate up", c("migrate", "up"), 0)
	must(t, "owners register", c("owners", "register"), 0)
	must(t, "enqueue", c("enqueue", "-t", "pedido.criado", "-k", "k-1"), 0)
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	var outbox string
	if err := db.QueryRowContext(ctx, "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%outbox'").Scan(&outbox); err != nil {
		t.Fatal(err)
	}
	leaky := `Post "https://gw.example/m2m?api_key=` + secret + `": connection refused`
	route := "pedidos → http https://u:" + secret + "@gw.example/m2m?k=" + secret
	if _, err := db.ExecContext(ctx, "UPDATE "+outbox+" SET state = 'dead', last_error = ?, last_route = ?", leaky, route); err != nil {
		t.Fatal(err)
	}
	drv, err := sqlite.Open(path, &sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	if err := drv.SetRouteStates(ctx, driver.RouteStatesParams{App: "pedidos", Replace: true, States: []driver.RouteState{
		{Type: "pedido.criado", App: "pedidos", Route: route, State: "paused", Since: time.Now(), Until: time.Now().Add(time.Minute), Failures: 3, LastError: leaky},
	}}); err != nil {
		t.Fatal(err)
	}
	r := c("dead", "list", "--json")
	var page DeadPage
	if err := json.Unmarshal([]byte(r.out), &page); err != nil || len(page.Messages) != 1 {
		t.Fatalf("dead list: %v %+v", err, r)
	}
	dead := page.Messages
	outs := []result{r, c("dead", "list"), c("dead", "show", fmt.Sprint(dead[0].ID)), c("status"), c("status", "--json")}
	for _, r := range outs {
		if r.code != 0 || strings.Contains(r.out+r.err, secret) || !strings.Contains(r.out, "gw.example/m2m?…") {
			t.Errorf("shows the secret, or not the masked URL: %+v", r)
		}
	}
}
