package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary builds cmd/mensageria once per test run: the end-to-end tests
// drive the real program, flags, exit codes and signals included.
func binary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "mensageria-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "mensageria")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/xadm/mensageria/cmd/mensageria").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

type proc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan int
}

func startProc(t *testing.T, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), stderr: &syncBuffer{}, done: make(chan int, 1)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.stderr
	p.cmd.Stdout = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.done <- p.cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
	})
	return p
}

func runBin(t *testing.T, bin string, env []string, stdin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return result{code, out.String(), errb.String()}
}

// The command as an operator runs it, on PostgreSQL: migrate, a relay
// subprocess killed with SIGKILL mid-batch and restarted, rows enqueued by
// the command and by plain SQL, status, dead letters, a graceful stop.
func TestEndToEndPostgres(t *testing.T) {
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	bin := binary(t)
	rcv := newReceiver(t)
	rcv.delay = 20 * time.Millisecond
	p := writeConfig(t, testdb.URL(), schema, rcv.srv.URL+"/m2m")
	env := []string{"TEST_TOKEN=tok"}
	c := func(stdin string, args ...string) result {
		t.Helper()
		return runBin(t, bin, env, stdin, append(args, "--config", p)...)
	}
	ctx := context.Background()
	count := func(where string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".outbox WHERE "+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if r := c("", "migrate", "check"); r.code != ExitFailure || !strings.Contains(r.out, "behind") {
		t.Fatalf("check before up: %+v", r)
	}
	if r := c("", "migrate", "up"); r.code != 0 {
		t.Fatalf("migrate up: %+v", r)
	}
	if r := c("", "migrate", "check", "--json"); r.code != 0 || !strings.Contains(r.out, `"current":true`) {
		t.Fatalf("migrate check: %+v", r)
	}
	if r := c("", "migrate", "sql"); r.code != 0 || !strings.Contains(r.out, schema+".outbox") {
		t.Fatalf("migrate sql: %+v", r)
	}

	// An app that enqueues by plain SQL before its relay ever ran records
	// its types first (docs/config.md, the deploy order).
	if r := c("", "owners", "register"); r.code != 0 {
		t.Fatalf("owners register: %+v", r)
	}

	// A type with no route: exit 2 and no row.
	if r := c("", "enqueue", "--type", "nota.fiscal", "--key", "nf-1"); r.code != ExitUsage || !strings.Contains(r.err, "no route") {
		t.Fatalf("enqueue without route: %+v", r)
	}
	if n := count("type = 'nota.fiscal'"); n != 0 {
		t.Fatalf("%d rows of an unrouted type", n)
	}

	// Enqueue from another language: plain SQL, no client library.
	const sqlRows = 300
	if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.outbox (type, key, payload) SELECT 'pedido.criado', 'sql-' || g, '{"from":"sql"}' FROM generate_series(1, %d) g`, schema, sqlRows)); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if r := c("", "enqueue", "-t", "pedido.criado", "-k", fmt.Sprintf("cli-%d", i), "-p", `{"from":"cli"}`); r.code != 0 {
			t.Fatalf("enqueue: %+v", r)
		}
	}
	total := sqlRows + 5

	relayArgs := []string{"relay", "--config", p, "--listen", "127.0.0.1:0", "--log-format", "json"}
	r1 := startProc(t, bin, env, relayArgs...)
	waitAddr(t, r1.stderr, r1.done)
	mensageriatest.Eventually(t, 20*time.Second, func() bool { return rcv.keys() >= 40 }, "the first deliveries")
	if err := r1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-r1.done
	atKill := rcv.keys()
	if atKill >= total {
		t.Fatalf("the relay finished (%d) before it was killed; the test needs a batch in flight", atKill)
	}
	// Its leases are still there: the batch it held was in flight.
	leased := count("state = 'pending' AND lease_until > now()")
	t.Logf("killed the relay with %d/%d delivered, %d rows still leased", atKill, total, leased)
	if leased == 0 {
		t.Fatal("no rows leased after the kill: it did not land mid-batch")
	}

	r2 := startProc(t, bin, env, relayArgs...)
	addr := waitAddr(t, r2.stderr, r2.done)
	mensageriatest.Eventually(t, 60*time.Second, func() bool { return rcv.keys() >= total }, "every message delivered after the restart")
	redelivered := 0
	rcv.mu.Lock()
	for _, n := range rcv.got {
		redelivered += n - 1
	}
	rcv.mu.Unlock()
	t.Logf("%d redeliveries after the kill", redelivered)

	st := status(t, c)
	if ty := st.typ("pedido.criado"); ty.Pending != 0 || ty.DeliveredLastHr != int64(total) || st.Election.Holder == "" || st.Election.Mode != "leader" {
		t.Fatalf("status: %+v", st)
	}

	// A refused message goes dead; after the cause is fixed, retry it.
	if r := c("", "enqueue", "-t", "pedido.criado", "-k", "refuse-1"); r.code != 0 {
		t.Fatalf("enqueue: %+v", r)
	}
	mensageriatest.Eventually(t, 20*time.Second, func() bool { return count("state = 'dead'") == 1 }, "a dead letter")
	r := c("", "dead", "list", "--json")
	var page DeadPage
	err := json.Unmarshal([]byte(r.out), &page)
	dead := page.Messages
	if err != nil || len(dead) != 1 || dead[0].Key != "refuse-1" || !strings.Contains(dead[0].LastError, "test refusal") {
		t.Fatalf("dead list: %v %+v", err, r)
	}
	rcv.mu.Lock()
	rcv.accept = true
	rcv.mu.Unlock()
	if r := c("", "dead", "retry", fmt.Sprint(dead[0].ID)); r.code != 0 {
		t.Fatalf("dead retry: %+v", r)
	}
	mensageriatest.Eventually(t, 20*time.Second, func() bool { return rcv.count("refuse-1") == 1 }, "the retried message delivered")
	if n := count("state = 'dead'"); n != 0 {
		t.Fatalf("%d dead after retry", n)
	}

	resp, err := getWithClient("http://" + addr + "/metrics")
	if err != nil || !strings.Contains(resp, `mensageria_deliveries_total{app="pedidos",outcome="delivered",type="pedido.criado"}`) || !strings.Contains(resp, "mensageria_election_holder") ||
		!strings.Contains(resp, `mensageria_outbox_pending{app="pedidos",owner="pedidos",type="pedido.criado"} 0`) {
		t.Fatalf("metrics: %v\n%s", err, resp)
	}

	// SIGTERM: a graceful stop, exit 0.
	_ = r2.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case code := <-r2.done:
		if code != 0 || !strings.Contains(r2.stderr.String(), "relay stopped") {
			t.Fatalf("relay exit %d:\n%s", code, r2.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("relay ignored SIGTERM")
	}
}

// The demo, as the README's first command runs it: the built program with
// no flags on embedded SQLite, and on PostgreSQL.
func TestDemoSQLite(t *testing.T) {
	testdb.Long(t, "demo")
	bin := binary(t)
	start := time.Now()
	r := runBin(t, bin, nil, "", "demo")
	if r.code != 0 || !strings.Contains(r.out, "PASS") {
		t.Fatalf("demo exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	for _, want := range []string{"KILL pedidos#1 mid-batch", "takes over", "foreign rows untouched  25/25 ok", "another app's type      ok", "duplicate effects", "lost", "dead, with reasons", "customer blocked", "on SQLite"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("demo output lacks %q", want)
		}
	}
	t.Logf("demo on SQLite took %s", time.Since(start).Round(time.Millisecond))
}

// The demo's own code, in process and so under the race detector when the
// tests run with -race; small, because the detector slows SQLite down.
func TestDemoInProcess(t *testing.T) {
	testdb.Long(t, "demo")
	r := run(t, "", nil, "demo", "--messages", "150")
	if r.code != 0 || !strings.Contains(r.out, "PASS") {
		t.Fatalf("demo exit %d\n%s\n%s", r.code, r.out, r.err)
	}
}

func TestDemoPostgres(t *testing.T) {
	testdb.Long(t, "demo")
	testdb.Pool(t)
	bin := binary(t)
	start := time.Now()
	r := runBin(t, bin, nil, "", "demo", "--db", testdb.URL())
	if r.code != 0 || !strings.Contains(r.out, "PASS") || !strings.Contains(r.out, "on PostgreSQL") {
		t.Fatalf("demo exit %d\n%s\n%s", r.code, r.out, r.err)
	}
	t.Logf("demo on PostgreSQL took %s", time.Since(start).Round(time.Millisecond))
}

// bench wires internal/bench: one JSON object per scenario, in a scratch
// schema that is dropped afterwards.
func TestBenchCommand(t *testing.T) {
	testdb.Long(t, "bench")
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	p := writeConfig(t, testdb.URL(), schema, "http://127.0.0.1:1/unused")
	r := run(t, "", tokEnv, "bench", "--config", p, "--json", "--messages", "2000", "--duration", "1s", "--overhead-duration", "500ms", "--producers", "2")
	if r.code != 0 {
		t.Fatalf("bench: %+v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	seen := map[string]bool{}
	for _, l := range lines {
		var res struct {
			Scenario string             `json:"scenario"`
			Metrics  map[string]float64 `json:"metrics"`
		}
		if err := json.Unmarshal([]byte(l), &res); err != nil || len(res.Metrics) == 0 {
			t.Fatalf("bench line %q: %v", l, err)
		}
		seen[res.Scenario] = true
	}
	if len(lines) != 3 || !seen["drain"] {
		t.Fatalf("bench output: %s", r.out)
	}
	if r := run(t, "", tokEnv, "bench", "--config", p, "--scenario", "nope"); r.code != ExitUsage {
		t.Fatalf("unknown scenario: %+v", r)
	}
	// The cost of the outbox's insert check, each way of enqueueing with
	// and without it.
	r = run(t, "", tokEnv, "bench", "--config", p, "--json", "--scenario", "enqueue-check", "--rounds", "1", "--check-for", "200ms")
	var check struct {
		Scenario string             `json:"scenario"`
		Metrics  map[string]float64 `json:"metrics"`
	}
	if err := json.Unmarshal([]byte(r.out), &check); err != nil || r.code != 0 || check.Scenario != "enqueue-check" {
		t.Fatalf("bench enqueue-check: %v %+v", err, r)
	}
	for _, k := range []string{"go-1", "go-100", "sql-1"} {
		for _, m := range []string{k + "-ratio", k + "-owner-ratio", k + "-ownerless-rows/s"} {
			if v := check.Metrics[m]; !(v > 0) {
				t.Errorf("enqueue-check %s = %v", m, v)
			}
		}
	}
	for _, bad := range [][]string{{"--broker-messages", "10"}, {"--batch", "0"}, {"--rounds", "0"}, {"--paced-for", "1ms"}, {"--check-for", "1ms"}} {
		args := append([]string{"bench", "--config", p, "--scenario", "kafka"}, bad...)
		if r := run(t, "", tokEnv, args...); r.code != ExitUsage {
			t.Errorf("bench %v: %+v, want a usage error", bad, r)
		}
	}
	var left int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1", schema+"_bench_%").Scan(&left); err != nil || left != 0 {
		t.Fatalf("scratch schema left behind: %d %v", left, err)
	}
}

// The broker scenarios, with the built binary: kafka on kfake run as a
// process of its own (the binary started again as the cluster) and in
// the bench's process, nats on the test server; every mode measured,
// every ratio reported, the Kafka drains at each claim size asked for.
func TestBenchBrokerScenarios(t *testing.T) {
	testdb.Long(t, "bench")
	testdb.Pool(t)
	if nc, err := natsgo.Connect(testdb.NatsURL(), natsgo.Timeout(2*time.Second)); err != nil {
		testdb.Unavailable(t, "NATS at "+testdb.NatsURL(), err)
	} else {
		nc.Close()
	}
	p := writeConfig(t, testdb.URL(), testdb.Schema(t), "http://127.0.0.1:1/unused")
	r := runBin(t, binary(t), []string{"TEST_TOKEN=tok"}, "", "bench", "--config", p, "--json", "--scenario", "kafka,nats",
		"--broker-messages", "1000", "--rounds", "1", "--paced-for", "300ms", "--nats-url", testdb.NatsURL(), "--kafka-claims", "1,20")
	if r.code != 0 {
		t.Fatalf("bench: %+v", r)
	}
	claims := []string{"claim=1-idempotent-msgs/s", "claim=1-transactional-msgs/s", "claim=1-idem/tx-ratio",
		"claim=20-idempotent-msgs/s", "claim=20-transactional-msgs/s", "claim=20-idem/tx-ratio", "lowest-idem/tx-ratio"}
	want := map[string][]string{
		"kafka-claims-process":    claims,
		"kafka-claims-in-process": claims,
		"kafka":                   {"relay-idempotent-msgs/s", "relay-transactional-msgs/s", "relay-tx/idem-ratio", "sender-tx/idem-ratio", "paced-idempotent-p50-ms", "paced-transactional-p99-ms"},
		"kafka-sink":              {"sink-db-msgs/s", "sink-plain-msgs/s", "sink-db/plain-ratio"},
		"nats":                    {"relay-msgid-msgs/s", "relay-plain-msgs/s", "relay-msgid/plain-ratio", "sink-db/plain-ratio"},
	}
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d results, want %d:\n%s", len(lines), len(want), r.out)
	}
	for _, l := range lines {
		var res struct {
			Scenario string             `json:"scenario"`
			Metrics  map[string]float64 `json:"metrics"`
		}
		if err := json.Unmarshal([]byte(l), &res); err != nil {
			t.Fatalf("bench line %q: %v", l, err)
		}
		names, ok := want[res.Scenario]
		if !ok {
			t.Fatalf("unexpected scenario %q", res.Scenario)
		}
		for _, n := range names {
			if v := res.Metrics[n]; !(v > 0) {
				t.Errorf("%s: %s = %v, want > 0", res.Scenario, n, v)
			}
		}
	}
}

// The http scenario measures the daemon's path (the relay command from a
// config with batch: true) beside the library's single and batch modes,
// in one run.
func TestBenchHTTPDaemonPath(t *testing.T) {
	testdb.Long(t, "bench")
	testdb.Pool(t)
	p := writeConfig(t, testdb.URL(), testdb.Schema(t), "http://127.0.0.1:1/unused")
	r := run(t, "", tokEnv, "bench", "--config", p, "--json", "--scenario", "http", "--messages", "2000", "--paced-for", "200ms")
	var res struct {
		Scenario string             `json:"scenario"`
		Metrics  map[string]float64 `json:"metrics"`
		Notes    string             `json:"notes"`
	}
	if err := json.Unmarshal([]byte(r.out), &res); err != nil || r.code != 0 || res.Scenario != "http-end-to-end" {
		t.Fatalf("bench http: %v %+v", err, r)
	}
	for _, k := range []string{"msgs/s", "batch-msgs/s", "daemon-msgs/s", "batch-ratio", "daemon-ratio", "daemon-p50-ms"} {
		if v := res.Metrics[k]; !(v > 0) {
			t.Errorf("%s = %v", k, v)
		}
	}
	if !strings.Contains(res.Notes, "daemon: throughput 1000 msgs") {
		t.Errorf("notes: %s", res.Notes)
	}
	t.Logf("single %.0f, batch %.0f, daemon %.0f msgs/s", res.Metrics["msgs/s"], res.Metrics["batch-msgs/s"], res.Metrics["daemon-msgs/s"])
}

// batch: true end to end on PostgreSQL: the built relay sends claims as
// batch requests to an m2mhttp.Receiver, is killed with SIGKILL in the
// middle and restarted; every message's effect runs once (the inbox
// absorbs the batches sent again), and a message the receiver refuses
// inside a batch goes dead alone, with its reason.
func TestEndToEndBatchPostgres(t *testing.T) {
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	bin := binary(t)
	const token = "batch-token"
	rcv := newInboxReceiver(t, nil, token, "pedido.criado")
	p := writeFile(t, fmt.Sprintf(`database: %s
schema: %s
app: pedidos
routes:
  - type: pedido.criado
    http: {url: %s/m2m, token: ${TEST_TOKEN}, batch: true, max_batch_items: 25}
relay: {batch: 100, lease: 5s, max_attempts: 5, poll_interval: 50ms, backoff_base: 10ms, backoff_max: 100ms}
`, testdb.URL(), schema, rcv.srv.URL))
	env := []string{"TEST_TOKEN=" + token}
	for _, args := range [][]string{{"migrate", "up"}, {"owners", "register"}} {
		if r := runBin(t, bin, env, "", append(args, "--config", p)...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	ctx := context.Background()
	const n = 3000
	if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.outbox (type, key, payload)
		SELECT 'pedido.criado', CASE WHEN g %% 1000 = 0 THEN 'refuse-' ELSE 'p-' END || g, '{}' FROM generate_series(1, %d) g`, schema, n)); err != nil {
		t.Fatal(err)
	}
	const refused = n / 1000
	args := []string{"relay", "--config", p, "--listen", "127.0.0.1:0", "--log-format", "json"}
	first := startProc(t, bin, env, args...)
	waitAddr(t, first.stderr, first.done)
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return rcv.keys() >= 300 }, "the first batches")
	if err := first.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-first.done
	atKill := rcv.keys()
	if atKill >= n-refused {
		t.Fatalf("the relay finished (%d) before it was killed", atKill)
	}
	second := startProc(t, bin, env, args...)
	waitAddr(t, second.stderr, second.done)
	mensageriatest.Eventually(t, 60*time.Second, func() bool { return rcv.keys() == n-refused }, "every message applied after the restart")
	var dead int
	var reasons []string
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		rows, err := pool.Query(ctx, "SELECT last_error FROM "+schema+".outbox WHERE state = 'dead'")
		if err != nil {
			t.Fatal(err)
		}
		reasons = reasons[:0]
		for rows.Next() {
			var r string
			_ = rows.Scan(&r)
			reasons = append(reasons, r)
		}
		dead = len(reasons)
		return dead == refused
	}, "the refused messages dead")
	stopProc(t, second)
	for _, r := range reasons {
		if !strings.Contains(r, "test refusal") {
			t.Errorf("dead letter reason %q", r)
		}
	}
	if rep := rcv.repeats(); len(rep) > 0 {
		t.Errorf("effects applied more than once: %v", rep)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	t.Logf("killed at %d/%d; %d requests, all batches: %v, at most %d messages each", atKill, n, rcv.posts, rcv.batches == rcv.posts, rcv.maxItems)
	if rcv.batches != rcv.posts || rcv.maxItems > 25 || rcv.posts > n/5 {
		t.Fatalf("%d requests, %d of them batches, at most %d messages each", rcv.posts, rcv.batches, rcv.maxItems)
	}
}
