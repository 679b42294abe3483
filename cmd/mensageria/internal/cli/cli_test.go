package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/mensageriatest"
)

// syncBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type result struct {
	code     int
	out, err string
}

func run(t *testing.T, stdin string, env map[string]string, args ...string) result {
	t.Helper()
	var out, errb syncBuffer
	code := Run(context.Background(), args, IO{In: strings.NewReader(stdin), Out: &out, Err: &errb, Env: func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}})
	return result{code, out.String(), errb.String()}
}

// receiver records envelopes and refuses keys starting with "refuse".
type receiver struct {
	mu     sync.Mutex
	got    map[string]int // key -> deliveries
	ids    map[string]int // message id -> deliveries
	accept bool           // accept "refuse" keys too
	delay  time.Duration
	srv    *httptest.Server
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{got: map[string]int{}, ids: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		var env struct {
			ID  string `json:"id"`
			Key string `json:"key"`
		}
		if err := json.NewDecoder(req.Body).Decode(&env); err != nil {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		if r.delay > 0 {
			time.Sleep(r.delay) // a slow receiver, the scenario of the test that sets delay
		}
		r.mu.Lock()
		accept := r.accept
		if !strings.HasPrefix(env.Key, "refuse") || accept {
			r.got[env.Key]++
			r.ids[env.ID]++
		}
		r.mu.Unlock()
		if strings.HasPrefix(env.Key, "refuse") && !accept {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = w.Write([]byte(`{"type":"about:blank","title":"Refused","status":422,"detail":"test refusal"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"applied"}`))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[key]
}

func (r *receiver) keys() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// writeFile writes a config file of the test's own and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mensageria.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeConfig(t *testing.T, database, schema, url string) string {
	t.Helper()
	return writeFile(t, fmt.Sprintf(`database: %s
schema: %s
app: pedidos
routes:
  - type: pedido.criado
    http: {url: %s, token: ${TEST_TOKEN}, timeout: 1500ms}
  - type: pedido.ordenado
    http: {url: %s, token: ${TEST_TOKEN}}
    ordering: key
relay: {batch: 50, concurrency: 8, lease: 2s, max_attempts: 5, election: leader, poll_interval: 50ms, backoff_base: 10ms, backoff_max: 100ms}
`, database, schema, url, url))
}

var tokEnv = map[string]string{"TEST_TOKEN": "tok"}

// envOf is an environment of the pairs kv (name, value, ...), for the
// config's loaders.
func envOf(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// waitDrained waits until schema's outbox holds no pending row.
func waitDrained(t *testing.T, pool *pgxpool.Pool, schema, what string, d time.Duration) {
	t.Helper()
	mensageriatest.Eventually(t, d, func() bool {
		var pending int
		if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+schema+".outbox WHERE state = 'pending'").Scan(&pending); err != nil {
			t.Fatal(err)
		}
		return pending == 0
	}, what)
}

func TestHelpEverywhere(t *testing.T) {
	cmds := [][]string{{}, {"migrate"}, {"migrate", "up"}, {"migrate", "check"}, {"migrate", "sql"}, {"relay"}, {"enqueue"}, {"status"}, {"dead"}, {"dead", "list"}, {"dead", "show"}, {"dead", "retry"}, {"dead", "discard"}, {"doubt"}, {"doubt", "list"}, {"doubt", "show"}, {"doubt", "resolve"}, {"owners"}, {"owners", "list"}, {"owners", "register"}, {"owners", "transfer"}, {"owners", "release"}, {"explain"}, {"bench"}, {"demo"}}
	for _, c := range cmds {
		r := run(t, "", nil, append(c, "--help")...)
		if r.code != 0 || !strings.Contains(r.out, "--config") || !strings.Contains(r.out, "Usage:") {
			t.Errorf("%v --help: code %d\n%s%s", c, r.code, r.out, r.err)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	cases := [][]string{{"nope"}, {"status", "--bogus"}, {"dead", "show"}, {"dead", "show", "abc"}, {"migrate"}, {"dead", "retry"}, {"enqueue", "extra"},
		{"owners"}, {"owners", "transfer", "type"}, {"owners", "release", "type", "t", "u"}, {"owners", "transfer", "kind", "name", "--from", "a", "--to", "b"}}
	for _, c := range cases {
		r := run(t, "", nil, c...)
		if r.code != ExitUsage || r.err == "" {
			t.Errorf("%v: code %d, stderr %q", c, r.code, r.err)
		}
	}
	r := run(t, "", nil, "status", "--config", filepath.Join(t.TempDir(), "missing.yaml"))
	if r.code != ExitUsage || !strings.Contains(r.err, "not found") {
		t.Errorf("missing config: %d %q", r.code, r.err)
	}
}

// A bad config is exit 2 with one message naming the file, line and field.
func TestConfigErrorThroughCommand(t *testing.T) {
	p := filepath.Join(t.TempDir(), "m.yaml")
	_ = os.WriteFile(p, []byte("database: sqlite:/tmp/x.db\napp: a\nroutes:\n  - type: t\n    http: {url: http://h/, token: ${MISSING_TOKEN}}\n"), 0o600)
	for _, cmd := range []string{"explain", "status", "relay", "enqueue"} {
		r := run(t, "", nil, cmd, "--config", p)
		want := p + ":5: routes[0].http.token: environment variable MISSING_TOKEN is not set"
		if r.code != ExitUsage || !strings.Contains(r.err, want) {
			t.Errorf("%s: code %d, stderr %q, want %q", cmd, r.code, r.err, want)
		}
	}
}

func TestExplain(t *testing.T) {
	p := writeConfig(t, "sqlite:/tmp/unused.db", "mensageria", "http://127.0.0.1:1/m2m")
	r := run(t, "", tokEnv, "explain", "--config", p)
	for _, want := range []string{"route pedido.criado", "at-least-once", "effectively-once", "idempotency must defend", "ordering    per key"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("explain lacks %q:\n%s", want, r.out)
		}
	}
	r = run(t, "", tokEnv, "explain", "--json", "--config", p)
	var out explainOut
	if err := json.Unmarshal([]byte(r.out), &out); err != nil || r.code != 0 {
		t.Fatalf("explain --json: %v %d %s", err, r.code, r.out)
	}
	if len(out.Routes) != 2 || out.Routes[0].Map.EndToEnd != "effectively-once" || out.Routes[1].Map.Ordering == "" || out.Election != "leader" {
		t.Fatalf("explain --json: %+v", out)
	}
}

// A config that still says election: advisory runs, and the command says
// once, on stderr, that the name is deprecated; stdout stays the JSON.
func TestDeprecatedElectionWarnsOnStderr(t *testing.T) {
	p := writeFile(t, "database: sqlite:/tmp/unused.db\napp: a\nroutes:\n  - type: t\n    http: {url: 'http://h/p', token: x}\nrelay: {election: advisory}\n")
	r := run(t, "", nil, "explain", "--json", "--config", p)
	var out explainOut
	if err := json.Unmarshal([]byte(r.out), &out); err != nil || r.code != 0 {
		t.Fatalf("explain --json: %v %d %s %s", err, r.code, r.out, r.err)
	}
	if out.Election != "leader" {
		t.Errorf("election %q, want leader", out.Election)
	}
	if n := strings.Count(r.err, "warning: "); n != 1 || !strings.Contains(r.err, "relay.election: advisory is the former name of leader") {
		t.Errorf("stderr %q, want one deprecation warning for relay.election", r.err)
	}
}

// A kafka route with a transactional id is relayed exactly once into Kafka,
// and explain says so; without one it stays at-least-once.
func TestExplainKafkaTransactional(t *testing.T) {
	p := writeFile(t, "database: sqlite:/tmp/unused.db\napp: a\nroutes:\n"+
		"  - type: a.tx\n    kafka: {brokers: [k:9092], topic: t, transactional_id: mensageria-relay-a}\n"+
		"  - type: a.plain\n    kafka: {brokers: [k:9092], topic: t}\n")
	r := run(t, "", nil, "explain", "--json", "--config", p)
	var out explainOut
	if err := json.Unmarshal([]byte(r.out), &out); err != nil || r.code != 0 {
		t.Fatalf("explain --json: %v %d %s", err, r.code, r.out)
	}
	tx, plain := out.Routes[0], out.Routes[1]
	if tx.Map.Hops[1].Level != "exactly-once" || tx.Map.EndToEnd != "exactly-once" || !strings.Contains(tx.Destination, "transactional id mensageria-relay-a") {
		t.Errorf("transactional route: %+v", tx)
	}
	if plain.Map.Hops[1].Level != "at-least-once" || plain.Map.EndToEnd == "exactly-once" {
		t.Errorf("plain route: %+v", plain)
	}
}

func TestPayloadArg(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "p.json")
	_ = os.WriteFile(f, []byte(" {\"a\": 1}\n"), 0o600)
	read := os.ReadFile
	for _, tc := range []struct {
		arg, stdin, want string
		bad              bool
	}{
		{arg: "", want: "{}"},
		{arg: `{"x":[1]}`, want: `{"x":[1]}`},
		{arg: "@" + f, want: `{"a": 1}`},
		{arg: "@-", stdin: "[1,2]\n", want: "[1,2]"},
		{arg: "{nope", bad: true},
		{arg: "@", bad: true},
		{arg: "@" + filepath.Join(dir, "missing.json"), bad: true},
		{arg: "@-", stdin: "  ", bad: true},
	} {
		got, err := parsePayloadArg(tc.arg, read, strings.NewReader(tc.stdin))
		if tc.bad != (err != nil) || (!tc.bad && string(got) != tc.want) {
			t.Errorf("%q: got %q, %v", tc.arg, got, err)
		}
	}
}

// The whole operator cycle on the embedded backend, in process: migrate,
// enqueue, relay with its HTTP surface, status, dead letters.
func TestCommandsOnSQLite(t *testing.T) {
	rcv := newReceiver(t)
	db := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	p := writeConfig(t, db, "mensageria", rcv.srv.URL+"/m2m")
	c := func(stdin string, args ...string) result {
		t.Helper()
		return run(t, stdin, tokEnv, append(args, "--config", p)...)
	}

	// check never creates the file that up creates.
	if r := c("", "migrate", "check"); r.code != ExitFailure || !strings.Contains(r.err, "the file does not exist") {
		t.Fatalf("check before up: %+v", r)
	}
	if r := c("", "migrate", "up"); r.code != 0 || !strings.Contains(r.out, "migrated") {
		t.Fatalf("up: %+v", r)
	}
	if r := c("", "migrate", "up", "--json"); r.code != 0 || !strings.Contains(r.out, `"current":true`) {
		t.Fatalf("up again: %+v", r)
	}
	if r := c("", "migrate", "check"); r.code != 0 || !strings.Contains(r.out, "current") {
		t.Fatalf("check: %+v", r)
	}
	if r := c("", "migrate", "sql"); r.code != 0 || !strings.Contains(strings.ToUpper(r.out), "CREATE TABLE") {
		t.Fatalf("sql: %+v", r)
	}

	// A type no app owns yet: exit 2, nothing written; the app records its
	// types with owners register (or its relay's start).
	if r := c("", "enqueue", "--type", "pedido.criado", "--key", "k", "--payload", "{}"); r.code != ExitUsage || !strings.Contains(r.err, "has no owner app") {
		t.Fatalf("enqueue before register: %+v", r)
	}
	if r := c("", "owners", "register"); r.code != 0 {
		t.Fatalf("owners register: %+v", r)
	}

	// No route: exit 2, nothing written.
	r := c("", "enqueue", "--type", "nota.fiscal", "--key", "k", "--payload", "{}")
	if r.code != ExitUsage || !strings.Contains(r.err, `no route for type "nota.fiscal"`) {
		t.Fatalf("no route: %+v", r)
	}
	if r := c("", "enqueue", "--type", "pedido.criado", "--key", "k", "--payload", "{oops"); r.code != ExitUsage || !strings.Contains(r.err, "not valid JSON") {
		t.Fatalf("bad payload: %+v", r)
	}
	for i := range 20 {
		if r := c("", "enqueue", "-t", "pedido.criado", "-k", fmt.Sprintf("p-%d", i), "-p", `{"n":1}`); r.code != 0 || !strings.Contains(r.out, "enqueued") {
			t.Fatalf("enqueue: %+v", r)
		}
	}
	if r := c(`{"from":"stdin"}`, "enqueue", "-t", "pedido.ordenado", "-k", "o-1", "-p", "@-", "--json"); r.code != 0 || !strings.Contains(r.out, `"id"`) {
		t.Fatalf("enqueue stdin: %+v", r)
	}
	for i := range 3 {
		if r := c("", "enqueue", "-t", "pedido.criado", "-k", fmt.Sprintf("refuse-%d", i)); r.code != 0 {
			t.Fatalf("enqueue refuse: %+v", r)
		}
	}
	st := status(t, c)
	if ty := st.typ("pedido.criado"); ty.Pending != 23 {
		t.Fatalf("status before relay: %+v", st)
	}
	if ty := st.typ("nota.fiscal"); ty.Type != "" {
		t.Fatalf("a row of the unrouted type exists: %+v", ty)
	}

	// The relay, in process, until its context ends.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"relay", "--config", p, "--listen", "127.0.0.1:0", "--log-format", "json"}, IO{Out: &out, Err: &errb, Env: func(k string) (string, bool) { v, ok := tokEnv[k]; return v, ok }})
	}()
	addr := waitAddr(t, &errb, done)
	mensageriatest.Eventually(t, 20*time.Second, func() bool { return rcv.keys() == 21 }, "delivery of 21 messages")
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("healthz %d", code)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Fatalf("readyz %d %s", code, body)
	}
	mensageriatest.Eventually(t, 10*time.Second, func() bool { return status(t, c).typ("pedido.criado").Dead == 3 }, "3 dead letters")
	_, metrics := get("/metrics")
	for _, want := range []string{
		`mensageria_deliveries_total{app="pedidos",outcome="delivered",type="pedido.criado"} 20`,
		`mensageria_dead_letters_total{app="pedidos",type="pedido.criado"} 3`,
		`mensageria_outbox_dead{app="pedidos",owner="pedidos",type="pedido.criado"} 3`,
		`mensageria_outbox_pending{app="pedidos",owner="pedidos",type="pedido.criado"} 0`,
		`mensageria_delivery_latency_seconds_bucket{app="pedidos",outcome="delivered",type="pedido.criado"`,
		`mensageria_relay_leader{app="pedidos"} 1`,
		`mensageria_election_holder{app="pedidos",holder="`,
		`mensageria_outbox_oldest_pending_seconds{app="pedidos",owner="pedidos",type="pedido.criado"}`,
		// Two routes to one URL: one route name, told apart by types.
		`mensageria_route_state{app="pedidos",route="pedidos → http ` + rcv.srv.URL + `/m2m",state="flowing",types="pedido.criado"} 1`,
		`mensageria_route_state{app="pedidos",route="pedidos → http ` + rcv.srv.URL + `/m2m",state="paused",types="pedido.ordenado"} 0`,
		`mensageria_route_failures{app="pedidos",route="pedidos → http ` + rcv.srv.URL + `/m2m",types="pedido.criado"} 0`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	st = status(t, c)
	if ty := st.typ("pedido.criado"); ty.Pending != 0 || ty.DeliveredLastHr != 20 || ty.Dead != 3 || ty.Owner != "pedidos" || st.Election.Holder == "" {
		t.Fatalf("status after relay: %+v", st)
	}
	if r := c("", "status"); r.code != 0 || !strings.Contains(r.out, "held by") || !strings.Contains(r.out, "pedido.criado") {
		t.Fatalf("status text: %+v", r)
	}

	// --watch refreshes until the context ends.
	wctx, wcancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	var wout syncBuffer
	code := Run(wctx, []string{"status", "--watch", "--interval", "100ms", "--json", "--config", p}, IO{Out: &wout, Err: io.Discard, Env: func(k string) (string, bool) { v, ok := tokEnv[k]; return v, ok }})
	wcancel()
	if n := strings.Count(wout.String(), `"app":"pedidos"`); code != 0 || n < 2 {
		t.Fatalf("status --watch: exit %d, %d snapshots", code, n)
	}

	// Dead letters: list, show, refuse without confirmation, retry.
	r = c("", "dead", "list", "--json")
	var page DeadPage
	err := json.Unmarshal([]byte(r.out), &page)
	dead := page.Messages
	if err != nil || len(dead) != 3 || !strings.Contains(dead[0].LastError, "422") {
		t.Fatalf("dead list: %v %+v", err, r)
	}
	if r := c("", "dead", "list"); !strings.Contains(r.out, "refuse-0") || !strings.Contains(r.out, "LAST ERROR") {
		t.Fatalf("dead list text: %+v", r)
	}
	if r := c("", "dead", "show", fmt.Sprint(dead[0].ID)); r.code != 0 || !strings.Contains(r.out, "refuse-") || !strings.Contains(r.out, "test refusal") {
		t.Fatalf("dead show: %+v", r)
	}
	if r := c("", "dead", "show", "999999"); r.code != ExitFailure {
		t.Fatalf("dead show missing: %+v", r)
	}
	rcv.mu.Lock()
	rcv.accept = true
	rcv.mu.Unlock()
	if r := c("n\n", "dead", "retry", "--type", "pedido.criado"); r.code != ExitFailure || !strings.Contains(r.err, "all 3 dead messages") || !strings.Contains(r.err, "nothing changed") {
		t.Fatalf("retry declined: %+v", r)
	}
	if r := c("", "dead", "retry", fmt.Sprint(dead[0].ID), fmt.Sprint(dead[1].ID)); r.code != ExitFailure {
		t.Fatalf("bulk retry without stdin must not proceed: %+v", r)
	}
	if r := c("", "dead", "retry", fmt.Sprint(dead[0].ID)); r.code != 0 || !strings.Contains(r.out, "1 dead message(s) back to pending") {
		t.Fatalf("retry one: %+v", r)
	}
	if r := c("y\n", "dead", "retry", fmt.Sprint(dead[1].ID), fmt.Sprint(dead[2].ID)); r.code != 0 || !strings.Contains(r.out, "2 dead message(s)") {
		t.Fatalf("retry confirmed: %+v", r)
	}
	mensageriatest.Eventually(t, 10*time.Second, func() bool {
		return rcv.count("refuse-0") == 1 && rcv.count("refuse-1") == 1 && rcv.count("refuse-2") == 1
	}, "retried messages delivered")
	if r := c("", "dead", "discard", "--type", "pedido.criado", "--yes"); r.code != 0 || !strings.Contains(r.out, "0 dead message(s) deleted") {
		t.Fatalf("discard: %+v", r)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("relay exit %d: %s", code, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("relay did not stop")
	}
	if !strings.Contains(errb.String(), `"msg":"relay stopped"`) {
		t.Fatalf("relay log: %s", errb.String())
	}
}

var addrLog = regexp.MustCompile(`"msg":"serving health and metrics","addr":"([^"]+)"`)

func waitAddr(t *testing.T, log interface{ String() string }, done <-chan int) string {
	t.Helper()
	var addr string
	mensageriatest.Eventually(t, 20*time.Second, func() bool {
		if m := addrLog.FindStringSubmatch(log.String()); m != nil && strings.Contains(log.String(), "relay started") {
			addr = m[1]
			return true
		}
		select {
		case code := <-done:
			t.Fatalf("relay exited %d: %s", code, log.String())
		default:
		}
		return false
	}, "the relay to start: %s", log)
	return addr
}

func (s *Status) typ(name string) StatusType {
	for _, t := range s.Types {
		if t.Type == name {
			return t
		}
	}
	return StatusType{}
}

func status(t *testing.T, c func(string, ...string) result) *Status {
	t.Helper()
	r := c("", "status", "--json")
	var st Status
	if err := json.NewDecoder(bufio.NewReader(strings.NewReader(r.out))).Decode(&st); err != nil || r.code != 0 {
		t.Fatalf("status --json: %v %+v", err, r)
	}
	return &st
}

func getWithClient(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
