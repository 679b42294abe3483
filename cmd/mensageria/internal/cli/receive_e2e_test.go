package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/cmd/mensageria/internal/testca"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

// freePort returns a local port nothing listens on now, so that a daemon
// restarted by the test comes back at the same address.
// freeAddr is a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", freePort(t))
}

var receivingBin = regexp.MustCompile(`"msg":"receiving","addr":"([^"]+)"`)

// waitReceiving waits until a receive process listens.
func waitReceiving(t *testing.T, p *proc) string {
	t.Helper()
	var addr string
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		if m := receivingBin.FindStringSubmatch(p.stderr.String()); m != nil {
			addr = m[1]
			return true
		}
		select {
		case code := <-p.done:
			t.Fatalf("receive exited %d:\n%s", code, p.stderr.String())
		default:
		}
		return false
	}, "receive to start:\n%s", p.stderr)
	return addr
}

// applier applies the inbox queue by psql, one transaction a round as
// docs/config.md gives it: claim, the business write, applied, commit. It
// runs until stop is closed and returns the rounds that failed (psql
// errors other than the daemon's absence are the test's failure).
func psqlApplier(t *testing.T, schema string, stop <-chan struct{}) (rounds func() int, wait func() []string) {
	bin, err := exec.LookPath("psql")
	if err != nil {
		testdb.Unavailable(t, "the psql binary", err)
	}
	round := fmt.Sprintf(`BEGIN;
CREATE TEMP TABLE claimed ON COMMIT DROP AS SELECT id, key, message_id FROM %[1]s.inbox_claim('fat', 25);
INSERT INTO %[1]s.effects (key, message_id) SELECT key, message_id FROM claimed;
SELECT %[1]s.inbox_applied(id) FROM claimed;
COMMIT;`, schema)
	var mu sync.Mutex
	var n int
	var failures []string
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				out, err := exec.Command(bin, testdb.URL(), "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-c", round).CombinedOutput()
				mu.Lock()
				n++
				if err != nil {
					failures = append(failures, fmt.Sprintf("%v: %s", err, out))
				}
				mu.Unlock()
				// An applier polls the queue at its own pace, as an
				// app's job does; no state is awaited here.
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	return func() int { mu.Lock(); defer mu.Unlock(); return n },
		func() []string { wg.Wait(); return failures }
}

// End to end with the built program, as an app in another language runs
// it: business transactions enqueue by plain SQL (some roll back), the
// relay daemon delivers to the receive daemon, two psql appliers apply
// from the inbox queue in their own transactions, and the receive daemon
// is SIGKILLed mid-way and restarted. Every committed message is applied
// exactly once, no rolled-back one, nothing is dead, nothing conflicts.
func TestEndToEndRelayIntoReceive(t *testing.T) {
	pool := testdb.Pool(t)
	sender, receiverSchema := testdb.Schema(t), testdb.Schema(t)
	bin := binary(t)
	ctx := context.Background()
	addr := freeAddr(t)
	env := []string{"TEST_TOKEN=tok-e2e-0123456789"}
	relayCfg := writeFile(t, fmt.Sprintf(`database: %s
schema: %s
app: pedidos
routes:
  - type: pedido.criado
    http: {url: http://%s/m2m, token: ${TEST_TOKEN}, timeout: 1500ms}
relay: {batch: 10, concurrency: 2, lease: 2s, max_attempts: 1000, poll_interval: 50ms, backoff_base: 20ms, backoff_max: 200ms}
`, testdb.URL(), sender, addr))
	receiveCfg := writeFile(t, fmt.Sprintf(`database: %s
schema: %s
app: faturamento
receive:
  listen: %s
  path: /m2m
  tokens: ["${TEST_TOKEN}"]
  notify_interval: 10ms
consumers:
  - name: fat
    types: [pedido.criado]
    window: 1h
`, testdb.URL(), receiverSchema, addr))
	must(t, "migrate up", runBin(t, bin, env, "", "migrate", "up", "--config", relayCfg), 0)
	must(t, "owners register", runBin(t, bin, env, "", "owners", "register", "--config", relayCfg), 0)
	count := func(q string) int {
		t.Helper()
		var n int
		q = strings.NewReplacer("{out}", sender, "{in}", receiverSchema).Replace(q)
		if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}

	// The business transactions: 30 of 20 messages, every third rolled back.
	committed := 0
	for i := range 30 {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			prefix := "c"
			if i%3 == 2 {
				prefix = "r"
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.outbox (type, key, payload)
				SELECT 'pedido.criado', '%s-%d-' || g, json_build_object('order', g) FROM generate_series(1, 20) g`, sender, prefix, i)); err != nil {
				return err
			}
			if prefix == "r" {
				return errRollback
			}
			return nil
		})
		switch {
		case err == nil:
			committed += 20
		case err != errRollback:
			t.Fatal(err)
		}
	}

	rcv := startProc(t, bin, env, "receive", "--config", receiveCfg, "--migrate", "--log-format", "json")
	waitReceiving(t, rcv)
	if _, err := pool.Exec(ctx, "CREATE TABLE "+receiverSchema+".effects (key text NOT NULL, message_id uuid NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	relay := startProc(t, bin, env, "relay", "--config", relayCfg, "--listen", "127.0.0.1:0", "--log-format", "json")
	waitAddr(t, relay.stderr, relay.done)
	stop := make(chan struct{})
	rounds, appliers := psqlApplier(t, receiverSchema, stop)

	mensageriatest.Eventually(t, 60*time.Second, func() bool { return count("SELECT count(*) FROM {in}.inbox_queue") >= 60 }, "the first deliveries stored")
	if err := rcv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-rcv.done
	atKill := count("SELECT count(*) FROM {in}.inbox_queue")
	if atKill >= committed {
		t.Fatalf("every message was stored (%d) before the kill; the test needs deliveries in flight", atKill)
	}
	t.Logf("killed the receive daemon with %d/%d stored, %d applied", atKill, committed, count("SELECT count(*) FROM {in}.effects"))
	// The relay meets a closed port meanwhile, and retries.
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		return count("SELECT count(*) FROM {out}.outbox WHERE state = 'pending' AND attempts > 0") > 0
	}, "the relay retrying")

	rcv2 := startProc(t, bin, env, "receive", "--config", receiveCfg, "--log-format", "json")
	waitReceiving(t, rcv2)
	mensageriatest.Eventually(t, 120*time.Second, func() bool {
		return count("SELECT count(*) FROM {out}.outbox") == 0 && count("SELECT count(*) FROM {in}.inbox_queue WHERE state = 'pending'") == 0 &&
			count("SELECT count(*) FROM {in}.effects") >= committed
	}, "every committed message delivered and applied")
	close(stop)
	if f := appliers(); len(f) > 0 {
		t.Fatalf("%d applier rounds failed, the first: %s", len(f), f[0])
	}
	t.Logf("%d psql applier rounds", rounds())

	for what, c := range map[string][2]int{
		"effects":                   {count("SELECT count(*) FROM {in}.effects"), committed},
		"distinct effects":          {count("SELECT count(DISTINCT message_id) FROM {in}.effects"), committed},
		"distinct keys":             {count("SELECT count(DISTINCT key) FROM {in}.effects"), committed},
		"rolled-back effects":       {count("SELECT count(*) FROM {in}.effects WHERE key LIKE 'r-%'"), 0},
		"queue rows":                {count("SELECT count(*) FROM {in}.inbox_queue"), committed},
		"applied queue rows":        {count("SELECT count(*) FROM {in}.inbox_queue WHERE state = 'applied'"), committed},
		"dedup records":             {count("SELECT count(*) FROM {in}.inbox WHERE consumer = 'fat'"), committed},
		"dead or pending at sender": {count("SELECT count(*) FROM {out}.outbox"), 0},
	} {
		if c[0] != c[1] {
			t.Errorf("%s: %d, want %d", what, c[0], c[1])
		}
	}
	if strings.Contains(rcv2.stderr.String(), "conflicting message refused") || strings.Contains(rcv.stderr.String(), "conflicting message refused") {
		t.Error("a redelivery was taken for a conflict")
	}
	stopProc(t, relay)
	_ = rcv2.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case code := <-rcv2.done:
		if code != 0 || !strings.Contains(rcv2.stderr.String(), "receive stopped") {
			t.Fatalf("receive exit %d:\n%s", code, rcv2.stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("receive ignored SIGTERM")
	}
}

var errRollback = fmt.Errorf("roll back")

// SIGHUP re-reads the tokens file and the TLS files, with no restart; until
// then what was read at start stays in force.
func TestReceiveSIGHUPReloads(t *testing.T) {
	b := sqliteBackend(t)
	bin := binary(t)
	ca := testca.New(t, "ca")
	a, b2 := ca.Leaf(t, "receiver-a", true), ca.Leaf(t, "receiver-b", true)
	certA, keyA, certB, keyB := a.CertFile, a.KeyFile, b2.CertFile, b2.KeyFile
	dir := t.TempDir()
	cert, key, tokens := dir+"/tls.crt", dir+"/tls.key", dir+"/tokens"
	cp := func(from, to string) {
		t.Helper()
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to+".new", b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(to+".new", to); err != nil {
			t.Fatal(err)
		}
	}
	cp(certA, cert)
	cp(keyA, key)
	if err := os.WriteFile(tokens, []byte("first-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := receiveConfig(t, b, fmt.Sprintf("  tokens_file: %s\n  tokens_check: off\n  tls: {cert_file: %s, key_file: %s}", tokens, cert, key), "1h")
	p := startProc(t, bin, nil, "receive", "--config", cfg, "--migrate", "--log-format", "json")
	addr := waitReceiving(t, p)
	url := "https://" + addr + "/"

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	n := 0
	try := func(tok string) (status int, serial int64) {
		t.Helper()
		n++
		// A new connection each time, so each sees the certificate in force.
		c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}}
		e, _ := envelope(t, "pedido.criado", fmt.Sprint("h-", n), `{}`, time.Now())
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(e))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", "hup")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.TLS.PeerCertificates[0].SerialNumber.Int64()
	}
	if st, serial := try("first-token-0123456789"); st != 200 || serial != a.Serial {
		t.Fatalf("at start: %d, certificate %d", st, serial)
	}
	if err := os.WriteFile(tokens+".new", []byte("second-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tokens+".new", tokens); err != nil {
		t.Fatal(err)
	}
	cp(certB, cert)
	cp(keyB, key)
	// With no file check, nothing changes before the signal.
	if st, serial := try("first-token-0123456789"); st != 200 || serial != a.Serial {
		t.Fatalf("before SIGHUP: %d, certificate %d", st, serial)
	}
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	mensageriatest.Eventually(t, 20*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), "TLS certificates reloaded")
	}, "the reload")
	if st, serial := try("second-token-0123456789"); st != 200 || serial != b2.Serial {
		t.Fatalf("after SIGHUP: %d, certificate %d", st, serial)
	}
	if st, _ := try("first-token-0123456789"); st != 401 {
		t.Fatalf("the dropped token after SIGHUP: %d", st)
	}
	// A broken key: refused, the certificate in force stays.
	if err := os.WriteFile(key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Process.Signal(syscall.SIGHUP)
	mensageriatest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(p.stderr.String(), "TLS reload refused") }, "the refused reload")
	if st, serial := try("second-token-0123456789"); st != 200 || serial != b2.Serial {
		t.Fatalf("after a refused reload: %d, certificate %d", st, serial)
	}
	stopProc(t, p)
}
