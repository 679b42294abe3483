package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/xadm/mensageria/cmd/mensageria/internal/testca"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

const natsServerBin = "/usr/sbin/nats-server"

// natsServer is a nats-server of the test's own, on a free loopback port,
// with its config and JetStream store in a temp dir; never the shared one.
type natsServer struct {
	URL string
}

// startNATS runs nats-server with the config text (listen, jetstream and
// store_dir are added) and waits until connect, as the test's own admin
// client, succeeds.
func startNATS(t *testing.T, conf string, admin ...natsgo.Option) (*natsServer, *natsgo.Conn) {
	t.Helper()
	bin, err := exec.LookPath(natsServerBin)
	if err != nil {
		testdb.Unavailable(t, "the nats-server binary", err)
	}
	dir := t.TempDir()
	port := freePort(t)
	path := filepath.Join(dir, "nats.conf")
	full := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n%s", port, filepath.Join(dir, "js"), conf)
	if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", path)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	s := &natsServer{URL: fmt.Sprintf("tls://127.0.0.1:%d", port)}
	var (
		nc      *natsgo.Conn
		lastErr error
	)
	mensageriatest.Eventually(t, 20*time.Second, func() bool {
		nc, lastErr = natsgo.Connect(s.URL, append(admin, natsgo.Timeout(time.Second))...)
		return lastErr == nil
	}, "nats-server to come up: %s\n%s", func() string { return fmt.Sprint(lastErr) }, &out)
	t.Cleanup(nc.Close)
	return s, nc
}

// The built relay publishes to a nats-server over TLS (a private CA) with
// a user and password, and with an nkey; a wrong password, an unknown
// nkey, no credentials or an unknown CA stops it at start, exit 2, naming
// what failed and never showing the password or the seed.
func TestRelayNATSTLSAndCredentials(t *testing.T) {
	bin := binary(t)
	ca := testca.New(t, "nats")
	srvCert := ca.Server(t)
	const password = "nats-PW-1234"
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := user.PublicKey()
	seed, _ := user.Seed()
	seedFile := filepath.Join(t.TempDir(), "relay.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	stranger, _ := nkeys.CreateUser()
	strangerSeed, _ := stranger.Seed()
	strangerFile := filepath.Join(t.TempDir(), "stranger.nk")
	if err := os.WriteFile(strangerFile, strangerSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	srv, admin := startNATS(t, fmt.Sprintf(`tls { cert_file: %q, key_file: %q }
authorization {
  users: [
    {user: relay, password: %q}
    {nkey: %s}
  ]
}
`, srvCert.CertFile, srvCert.KeyFile, password, pub), natsgo.UserInfo("relay", password), natsgo.Secure(ca.ClientTLS(nil)))
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "PEDIDOS", Subjects: []string{"pedidos.>"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"NATS_PASSWORD=" + password, "NATS_CA=" + ca.CAFile, "WRONG_PASSWORD=wrong-PW-9999"}
	route := func(typ, subject, security string) string {
		return fmt.Sprintf("  - type: %s\n    nats:\n      url: %s\n      subject: %s\n      stream: PEDIDOS\n%s", typ, srv.URL, subject, security)
	}
	const tlsBlock = "      tls: {ca_file: ${NATS_CA}}\n"
	p := sqliteConfig(t, route("pedido.criado", "pedidos.criado", tlsBlock+"      user: relay\n      password: ${NATS_PASSWORD}\n")+
		route("pedido.nkey", "pedidos.nkey", tlsBlock+"      nkey_file: "+seedFile+"\n"))
	const n = 200
	prepare(t, bin, p, env, n, "pedido.criado", "pedido.nkey")

	relay := startProc(t, bin, env, "relay", "--config", p, "--listen", "127.0.0.1:0", "--log-format", "json")
	waitAddr(t, relay.stderr, relay.done)
	mensageriatest.Eventually(t, 60*time.Second, func() bool {
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 2*n
	}, "every message in the stream")
	stopProc(t, relay)
	log := relay.stderr.String()
	if !strings.Contains(log, `"security":"TLS, CA `+ca.CAFile+`, user relay"`) || !strings.Contains(log, `"security":"TLS, CA `+ca.CAFile+`, nkey `+seedFile+`"`) {
		t.Fatalf("the security of each route is not logged:\n%s", log)
	}
	for _, subject := range []string{"pedidos.criado", "pedidos.nkey"} {
		info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil || info.State.Subjects[subject] != n {
			t.Fatalf("%s: %v %+v", subject, err, info.State.Subjects)
		}
	}
	noSecret(t, "the relay's log", log, password, string(seed))

	for _, tc := range []struct {
		name, security, want string
	}{
		{"a wrong password", tlsBlock + "      user: relay\n      password: ${WRONG_PASSWORD}\n", "the server refused user relay"},
		{"an nkey the server does not know", tlsBlock + "      nkey_file: " + strangerFile + "\n", "the server refused the nkey " + strangerFile},
		{"no credentials", tlsBlock, "the server refused anonymous connections"},
		{"the system's CAs", "      user: relay\n      password: ${NATS_PASSWORD}\n", "the server's certificate is not signed by a CA in the system's CAs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := sqliteConfig(t, route("pedido.criado", "pedidos.criado", tc.security))
			code, out := refusedAtStart(t, bin, env, bad)
			t.Logf("%s", out)
			if code != ExitUsage || !strings.Contains(out, "route pedido.criado (line 4): subject pedidos.criado on "+srv.URL+" (stream PEDIDOS): "+tc.want) {
				t.Fatalf("exit %d, want %d and %q:\n%s", code, ExitUsage, tc.want, out)
			}
			noSecret(t, "the refusal", out, password, "wrong-PW-9999", string(strangerSeed), string(seed))
		})
	}
}

var horizonLog = regexp.MustCompile(`level=WARN msg="the relay can redeliver after the stream's duplicate window[^"]*" stream=(\S+) duplicate_window=(\S+) retry_horizon=(\S+)`)

// 'mensageria relay' checks each NATS route's stream against its own
// retry horizon at start: the route whose stream's duplicate window is
// shorter gets the warning, with the horizon explain reports; the route
// whose window covers it does not.
func TestRelayWarnsOfAShortDuplicateWindow(t *testing.T) {
	bin := binary(t)
	nc, err := natsgo.Connect(testdb.NatsURL(), natsgo.Timeout(2*time.Second))
	if err != nil {
		testdb.Unavailable(t, "NATS at "+testdb.NatsURL(), err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tag := fmt.Sprintf("%08x", rand.Uint32())
	short, long := "MS_SHORT_"+tag, "MS_LONG_"+tag
	for name, window := range map[string]time.Duration{short: time.Minute, long: 7 * 24 * time.Hour} {
		if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"ms." + name}, Duplicates: window, Storage: jetstream.MemoryStorage}); err != nil {
			if err == jetstream.ErrJetStreamNotEnabled {
				testdb.Unavailable(t, "JetStream at "+testdb.NatsURL(), err)
			}
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	}
	// The relay's own figures decide the horizon: 20 attempts, 30 s
	// leases, backoff to 10 min (the defaults), so about two hours.
	p := writeFile(t, fmt.Sprintf(`database: sqlite:%s
app: pedidos
routes:
  - type: pedido.curto
    nats: {url: %s, subject: ms.%s, stream: %s}
  - type: pedido.longo
    nats: {url: %s, subject: ms.%s, stream: %s}
relay: {poll_interval: 50ms}
`, filepath.Join(t.TempDir(), "outbox.db"), testdb.NatsURL(), short, short, testdb.NatsURL(), long, long))
	r := runBin(t, bin, nil, "", "explain", "--no-db", "--json", "--config", p)
	var ex explainOut
	if err := json.Unmarshal([]byte(r.out), &ex); err != nil || ex.Timing.RetryHorizonSec <= time.Minute.Seconds() {
		t.Fatalf("explain: %v %+v", err, r)
	}
	relay := startProc(t, bin, nil, "relay", "--config", p, "--migrate", "--listen", "127.0.0.1:0")
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(relay.stderr.String(), "relay started") }, "the relay to start")
	stopProc(t, relay)
	log := relay.stderr.String()
	warnings := horizonLog.FindAllStringSubmatch(log, -1)
	if len(warnings) != 1 {
		t.Fatalf("%d duplicate-window warnings, want 1 (the short stream's):\n%s", len(warnings), log)
	}
	w := warnings[0]
	horizon, err := time.ParseDuration(w[3])
	if err != nil {
		t.Fatal(err)
	}
	if w[1] != short || w[2] != "1m0s" || horizon.Seconds() != ex.Timing.RetryHorizonSec {
		t.Fatalf("warning %q: want stream %s, window 1m0s and explain's horizon %.0fs", w[0], short, ex.Timing.RetryHorizonSec)
	}
	t.Logf("%s", w[0])
}
