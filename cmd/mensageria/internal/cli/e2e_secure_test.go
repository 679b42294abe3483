package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/testca"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
	"github.com/xadm/mensageria/mensageriatest"
	"github.com/xadm/mensageria/transport/kafka"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// inboxReceiver is a receiving app as the daemon's users run it: an
// m2mhttp.Receiver over an Inbox of its own (SQLite) whose effect writes
// a row in the inbox's transaction, and a record of how the requests came.
type inboxReceiver struct {
	srv *httptest.Server
	db  *sql.DB // reads the effects table
	t   *testing.T
	// down makes the receiver answer 503 to every delivery: an outage.
	down atomic.Bool

	mu       sync.Mutex
	posts    int            // POST requests
	batches  int            // of which batch requests
	maxItems int            // the most envelopes one batch request held
	peers    map[string]int // client certificate CN -> requests
	arrived  []time.Time    // when each POST arrived
}

func newInboxReceiver(t *testing.T, serverTLS *tls.Config, token string, types ...string) *inboxReceiver {
	t.Helper()
	path := filepath.Join(t.TempDir(), "receiver.db")
	drv, err := sqlite.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = drv.Close() })
	ctx := context.Background()
	if _, err := drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: "billing"}); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.ExecContext(ctx, "CREATE TABLE effects (key TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	inbox, err := mensageria.NewInbox(drv, mensageria.InboxConfig{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	r := &inboxReceiver{db: db, t: t, peers: map[string]int{}}
	handlers := map[string]m2mhttp.Handler{}
	for _, typ := range types {
		handlers[typ] = m2mhttp.Handler{Inbox: inbox, Effect: func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
			if strings.HasPrefix(d.Key, "refuse") {
				return mensageria.Permanent(errors.New("test refusal"))
			}
			// No unique key: an effect applied twice would show as two rows.
			_, err := tx.Raw().(*sql.Tx).ExecContext(ctx, "INSERT INTO effects (key) VALUES (?)", d.Key)
			return err
		}}
	}
	rc, err := m2mhttp.NewReceiver(m2mhttp.ReceiverConfig{Tokens: []string{token}, Handlers: handlers,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method == http.MethodPost && r.down.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		if req.Method == http.MethodPost {
			body, _ := io.ReadAll(req.Body)
			req.Body = io.NopCloser(bytes.NewReader(body))
			r.mu.Lock()
			r.posts++
			r.arrived = append(r.arrived, time.Now())
			if mt, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type")); mt == m2mhttp.ContentTypeBatch {
				r.batches++
				var b struct {
					Messages []json.RawMessage `json:"messages"`
				}
				_ = json.Unmarshal(body, &b)
				r.maxItems = max(r.maxItems, len(b.Messages))
			}
			if req.TLS != nil && len(req.TLS.PeerCertificates) > 0 {
				r.peers[req.TLS.PeerCertificates[0].Subject.CommonName]++
			}
			r.mu.Unlock()
		}
		rc.ServeHTTP(w, req)
	})
	r.srv = httptest.NewUnstartedServer(h)
	r.srv.Config.ErrorLog = slog.NewLogLogger(slog.NewTextHandler(testWriter{t}, nil).WithAttrs([]slog.Attr{slog.String("from", "receiver's server")}), slog.LevelInfo)
	if serverTLS != nil {
		r.srv.TLS = serverTLS
		r.srv.StartTLS()
	} else {
		r.srv.Start()
	}
	t.Cleanup(r.srv.Close)
	return r
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("receiver: %s", strings.TrimSpace(string(p)))
	return len(p), nil
}

// keys is how many distinct keys the effect committed.
func (r *inboxReceiver) keys() int {
	var n int
	if err := r.db.QueryRow("SELECT count(DISTINCT key) FROM effects").Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// repeats lists the keys whose effect committed more than once.
func (r *inboxReceiver) repeats() []string {
	rows, err := r.db.Query("SELECT key || ' x' || count(*) FROM effects GROUP BY key HAVING count(*) > 1 ORDER BY key")
	if err != nil {
		r.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		_ = rows.Scan(&s)
		out = append(out, s)
	}
	return out
}

func (r *inboxReceiver) postCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.posts
}

// sqliteConfig writes the config of app pedidos on a SQLite file of the
// test's own with the given routes block.
func sqliteConfig(t *testing.T, routes string) string {
	t.Helper()
	return writeFile(t, fmt.Sprintf("database: sqlite:%s\napp: pedidos\nroutes:\n%s"+
		"relay: {batch: 100, lease: 10s, poll_interval: 50ms, backoff_base: 10ms, backoff_max: 100ms}\n",
		filepath.Join(t.TempDir(), "outbox.db"), routes))
}

// prepare migrates the config's database, records its types and enqueues
// n messages of each type through the command's own client.
func prepare(t *testing.T, bin, path string, env []string, n int, types ...string) {
	t.Helper()
	if r := runBin(t, bin, env, "", "migrate", "up", "--config", path); r.code != 0 {
		t.Fatalf("migrate up: %+v", r)
	}
	if r := runBin(t, bin, env, "", "owners", "register", "--config", path); r.code != 0 {
		t.Fatalf("owners register: %+v", r)
	}
	c, err := config.LoadConfig(path, envLookup(env))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b, cl, err := connect(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, typ := range types {
		for from := 0; from < n; from += 100 {
			var msgs []mensageria.Message
			for i := from; i < min(from+100, n); i++ {
				msgs = append(msgs, mensageria.Message{Type: typ, Key: fmt.Sprintf("%s-%d", typ, i), Payload: []byte(`{"n":1}`)})
			}
			if _, err := cl.Enqueue(ctx, msgs...); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func envLookup(env []string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		for _, kv := range env {
			if name, v, ok := strings.Cut(kv, "="); ok && name == k {
				return v, true
			}
		}
		return "", false
	}
}

// refusedAtStart runs a relay that must stop before it starts relaying,
// and returns its exit code and output.
func refusedAtStart(t *testing.T, bin string, env []string, path string) (int, string) {
	t.Helper()
	p := startProc(t, bin, env, "relay", "--config", path, "--listen", "127.0.0.1:0")
	select {
	case code := <-p.done:
		out := p.stderr.String()
		if strings.Contains(out, "relay started") {
			t.Fatalf("the relay started:\n%s", out)
		}
		return code, out
	case <-time.After(60 * time.Second):
		t.Fatalf("the relay did not stop:\n%s", p.stderr.String())
	}
	return 0, ""
}

// noSecret fails when a secret appears in a command's output.
func noSecret(t *testing.T, where, out string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Fatalf("%s shows the secret %q:\n%s", where, s, out)
		}
	}
}

// The built relay delivers to an HTTPS receiver whose certificate a
// private CA signed and which requires a client certificate, in batch
// requests; every misconfiguration of that TLS stops it at start, exit 2,
// with a message naming what failed and no secret.
func TestRelayHTTPSMutualTLSBatch(t *testing.T) {
	bin := binary(t)
	ca := testca.New(t, "billing")
	client := ca.Client(t, "mensageria-relay")
	const token = "bearer-S3CRET-4711"
	rcv := newInboxReceiver(t, ca.ServerTLS(t, ca), token, "pedido.criado")
	env := []string{"BILLING_TOKEN=" + token, "CERT_DIR=" + ca.Dir}
	route := func(tlsBlock string) string {
		s := fmt.Sprintf("  - type: pedido.criado\n    http:\n      url: %s/m2m\n      token: ${BILLING_TOKEN}\n      batch: true\n      max_batch_items: 40\n", rcv.srv.URL)
		if tlsBlock != "" {
			s += "      tls: " + tlsBlock + "\n"
		}
		return s
	}
	good := route(`{ca_file: "${CERT_DIR}/billing-ca.pem", cert_file: "${CERT_DIR}/mensageria-relay.pem", key_file: "${CERT_DIR}/mensageria-relay.key"}`)
	p := sqliteConfig(t, good)
	const n = 500
	prepare(t, bin, p, env, n, "pedido.criado")

	r := runBin(t, bin, env, "", "explain", "--no-db", "--config", p)
	if r.code != 0 || !strings.Contains(r.out, "security    TLS, CA") || !strings.Contains(r.out, "delivery    batch: a claim's messages in requests of at most 40 messages") {
		t.Fatalf("explain: %+v", r)
	}
	noSecret(t, "explain", r.out+r.err, token)
	r = runBin(t, bin, env, "", "explain", "--no-db", "--json", "--config", p)
	var ex explainOut
	if err := json.Unmarshal([]byte(r.out), &ex); err != nil || len(ex.Routes) != 1 || ex.Routes[0].Security != "TLS, CA "+ca.CAFile+", client certificate "+client.CertFile+"; bearer token" ||
		!strings.HasPrefix(ex.Routes[0].Delivery, "batch") {
		t.Fatalf("explain --json: %v %+v", err, r)
	}
	noSecret(t, "explain --json", r.out+r.err, token)

	relay := startProc(t, bin, env, "relay", "--config", p, "--listen", "127.0.0.1:0", "--log-format", "json")
	waitAddr(t, relay.stderr, relay.done)
	mensageriatest.Eventually(t, 60*time.Second, func() bool { return rcv.keys() == n }, "every message applied")
	stopProc(t, relay)
	log := relay.stderr.String()
	if !strings.Contains(log, `"msg":"TLS checked"`) {
		t.Fatalf("no TLS check logged:\n%s", log)
	}
	noSecret(t, "the relay's log", log, token)
	if rep := rcv.repeats(); len(rep) > 0 {
		t.Errorf("effects applied more than once: %v", rep)
	}
	rcv.mu.Lock()
	posts, batches, maxItems, peers := rcv.posts, rcv.batches, rcv.maxItems, fmt.Sprint(rcv.peers)
	rcv.mu.Unlock()
	t.Logf("%d messages in %d requests (%d batches, at most %d per request); client certificates %s", n, posts, batches, maxItems, peers)
	// Batches of at most 40: at least n/40 requests, and far fewer than
	// one per message.
	if batches != posts || posts < n/40 || posts > n/4 || maxItems > 40 || maxItems < 2 || peers != fmt.Sprintf("map[mensageria-relay:%d]", posts) {
		t.Fatalf("requests: %d posts, %d batches, at most %d per batch, peers %s", posts, batches, maxItems, peers)
	}

	// Each way the TLS can be wrong, and what the relay says.
	other := testca.New(t, "other")
	stranger := other.Client(t, "stranger")
	notPEM := filepath.Join(t.TempDir(), "notpem.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := rcv.postCount()
	for _, tc := range []struct {
		name, tls, want string
	}{
		{"no client certificate", `{ca_file: "${CERT_DIR}/billing-ca.pem"}`, "the server refused the TLS handshake; it may require a client certificate (tls.cert_file and tls.key_file)"},
		{"a client certificate another CA signed", fmt.Sprintf(`{ca_file: "${CERT_DIR}/billing-ca.pem", cert_file: %s, key_file: %s}`, stranger.CertFile, stranger.KeyFile),
			"it does not accept the client certificate " + stranger.CertFile},
		{"the system's CAs", "", "the server's certificate is not signed by a CA in the system's CAs"},
		{"another CA", fmt.Sprintf(`{ca_file: %s}`, other.CAFile), "the server's certificate is not signed by a CA in ca_file " + other.CAFile},
		{"a CA file that is not PEM", fmt.Sprintf(`{ca_file: %s}`, notPEM), "routes[0].http.tls.ca_file: " + notPEM + " holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := sqliteConfig(t, route(tc.tls))
			code, out := refusedAtStart(t, bin, env, bad)
			t.Logf("%s", out)
			if code != ExitUsage || !strings.Contains(out, tc.want) {
				t.Fatalf("exit %d, want %d and %q:\n%s", code, ExitUsage, tc.want, out)
			}
			if !strings.Contains(out, "routes[0].http.tls") && !strings.Contains(out, "route pedido.criado (line 4): POST "+rcv.srv.URL+"/m2m: ") {
				t.Fatalf("the message does not name the route:\n%s", out)
			}
			noSecret(t, "the refusal", out, token)
		})
	}
	if after := rcv.postCount(); after != before {
		t.Fatalf("%d deliveries from refused relays", after-before)
	}
}

// freePort is a loopback port nothing listened on a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// The built relay produces into a Kafka cluster that requires TLS (a
// private CA) and SASL, on the idempotent and on the transactional path;
// a wrong password, another mechanism, a missing CA or a missing block
// stops it at start, exit 2, naming SASL and the mechanism (or what else
// failed), and never showing the password.
func TestRelayKafkaSASLAndTLS(t *testing.T) {
	bin := binary(t)
	ca := testca.New(t, "kafka")
	const user, password = "relay", "kafka-PW-0815"
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", user, password),
		kfake.TLS(ca.ServerTLS(t, nil)), kfake.SeedTopics(3, "pedidos", "pedidos.tx"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := strings.Join(cluster.ListenAddrs(), ", ")
	env := []string{"KAFKA_PASSWORD=" + password, "KAFKA_CA=" + ca.CAFile, "WRONG_PASSWORD=wrong-PW-4242"}
	route := func(typ, topic, extra, security string) string {
		return fmt.Sprintf("  - type: %s\n    kafka:\n      brokers: [%s]\n      topic: %s\n%s%s", typ, brokers, topic, extra, security)
	}
	const good = "      tls: {ca_file: ${KAFKA_CA}}\n      sasl: {mechanism: SCRAM-SHA-256, user: relay, password: ${KAFKA_PASSWORD}}\n"
	p := sqliteConfig(t, route("pedido.criado", "pedidos", "", good)+route("pedido.tx", "pedidos.tx", "      transactional_id: mensageria-relay-pedidos\n", good))
	const n = 300
	prepare(t, bin, p, env, n, "pedido.criado", "pedido.tx")

	// A consumer of its own with the same credentials: every committed
	// record, by message id.
	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.DialTLSConfig(ca.ClientTLS(nil)),
		kgo.SASL(scram.Auth{User: user, Pass: password}.AsSha256Mechanism()),
		kgo.ConsumeTopics("pedidos", "pedidos.tx"), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	var mu sync.Mutex
	seen := map[string]int{}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		for ctx.Err() == nil {
			consumer.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
				d, err := kafka.DeliveryOf(r)
				if err != nil {
					t.Errorf("record at %s/%d: %v", r.Topic, r.Offset, err)
					return
				}
				mu.Lock()
				seen[d.Type+" "+d.ID.String()]++
				mu.Unlock()
			})
		}
	}()
	relay := startProc(t, bin, env, "relay", "--config", p, "--listen", "127.0.0.1:0", "--log-format", "json")
	waitAddr(t, relay.stderr, relay.done)
	mensageriatest.Eventually(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 2*n
	}, "every message in Kafka")
	stopProc(t, relay)
	log := relay.stderr.String()
	if strings.Count(log, `"msg":"Kafka reached"`) != 2 || !strings.Contains(log, `"security":"TLS, CA `+ca.CAFile+`, SASL SCRAM-SHA-256 as relay"`) {
		t.Fatalf("the start check is not logged for both routes:\n%s", log)
	}
	noSecret(t, "the relay's log", log, password)
	mu.Lock()
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s read %d times", id, c)
		}
	}
	mu.Unlock()

	for _, tc := range []struct {
		name, security, want string
	}{
		{"a wrong password", "      tls: {ca_file: ${KAFKA_CA}}\n      sasl: {mechanism: SCRAM-SHA-256, user: relay, password: ${WRONG_PASSWORD}}\n",
			"SASL SCRAM-SHA-256 as user relay refused by the broker"},
		{"a mechanism the user has no credentials for", "      tls: {ca_file: ${KAFKA_CA}}\n      sasl: {mechanism: SCRAM-SHA-512, user: relay, password: ${KAFKA_PASSWORD}}\n",
			"SASL SCRAM-SHA-512 as user relay refused by the broker"},
		{"PLAIN", "      tls: {ca_file: ${KAFKA_CA}}\n      sasl: {mechanism: PLAIN, user: relay, password: ${KAFKA_PASSWORD}}\n",
			"SASL PLAIN as user relay refused by the broker"},
		{"no sasl block", "      tls: {ca_file: ${KAFKA_CA}}\n", "the broker closed the connection at once: it probably requires SASL (add a sasl: block)"},
		{"no tls block", "      sasl: {mechanism: SCRAM-SHA-256, user: relay, password: ${KAFKA_PASSWORD}}\n", "the broker closed the connection at once: it probably requires TLS (add a tls: block)"},
		{"the system's CAs", "      tls: {}\n      sasl: {mechanism: SCRAM-SHA-256, user: relay, password: ${KAFKA_PASSWORD}}\n",
			"the server's certificate is not signed by a CA in the system's CAs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := sqliteConfig(t, route("pedido.criado", "pedidos", "", tc.security))
			code, out := refusedAtStart(t, bin, env, bad)
			t.Logf("%s", out)
			if code != ExitUsage || !strings.Contains(out, "route pedido.criado (line 4): topic pedidos on "+brokers+": "+tc.want) {
				t.Fatalf("exit %d, want %d and %q:\n%s", code, ExitUsage, tc.want, out)
			}
			noSecret(t, "the refusal", out, password, "wrong-PW-4242")
		})
	}
}

// A route's max_rate holds through the built relay: no second sees more
// than the rate of deliveries arrive (one more, and a little slack for
// requests the network bunches), every message is delivered and none goes
// dead for waiting, with max_attempts 1.
func TestRelayMaxRate(t *testing.T) {
	bin := binary(t)
	const token = "rate-token"
	rcv := newInboxReceiver(t, nil, token, "pedido.lento")
	p := writeFile(t, fmt.Sprintf(`database: sqlite:%s
app: pedidos
routes:
  - type: pedido.lento
    max_rate: 10
    http: {url: %s/m2m, token: ${TOKEN}}
relay: {batch: 100, concurrency: 16, max_attempts: 1, poll_interval: 50ms}
`, filepath.Join(t.TempDir(), "outbox.db"), rcv.srv.URL))
	env := []string{"TOKEN=" + token}
	const n = 35
	prepare(t, bin, p, env, n, "pedido.lento")
	relay := startProc(t, bin, env, "relay", "--config", p, "--listen", "127.0.0.1:0", "--log-format", "json")
	addr := waitAddr(t, relay.stderr, relay.done)
	mensageriatest.Eventually(t, 60*time.Second, func() bool { return rcv.keys() == n }, "every message applied")
	metrics, err := getWithClient("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	stopProc(t, relay)
	if strings.Contains(metrics, `outcome="dead"`) || strings.Contains(metrics, `outcome="retry"`) {
		t.Fatalf("deliveries that were not clean:\n%s", metrics)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	most := 0
	for i, a := range rcv.arrived {
		in := 0
		for _, b := range rcv.arrived[i:] {
			if b.Sub(a) < time.Second {
				in++
			}
		}
		most = max(most, in)
	}
	span := rcv.arrived[len(rcv.arrived)-1].Sub(rcv.arrived[0])
	t.Logf("%d deliveries over %s, at most %d in one second", len(rcv.arrived), span.Round(time.Millisecond), most)
	if len(rcv.arrived) != n || most > 10+1+2 {
		t.Fatalf("%d deliveries, %d of them in one second: max_rate 10 not held", len(rcv.arrived), most)
	}
}

// The flow control as the built relay runs it from its config: a receiver
// down (503) pauses its route after route_failure_threshold failures,
// /metrics and /readyz say so while the relay stays ready and the other
// route keeps delivering, and when it comes back every message is
// delivered, none dead although max_attempts is 2.
func TestRelayRoutePausesAndResumes(t *testing.T) {
	bin := binary(t)
	const token = "flow-token"
	sick := newInboxReceiver(t, nil, token, "pedido.doente")
	well := newInboxReceiver(t, nil, token, "pedido.sao")
	sick.down.Store(true)
	p := writeFile(t, fmt.Sprintf(`database: sqlite:%s
app: pedidos
routes:
  - type: pedido.doente
    http: {url: %s/m2m, token: ${TOKEN}, batch: true}
  - type: pedido.sao
    http: {url: %s/m2m, token: ${TOKEN}}
relay: {max_attempts: 2, poll_interval: 50ms, backoff_base: 10ms, backoff_max: 50ms, route_failure_threshold: 2, route_pause: 100ms, route_pause_max: 200ms}
`, filepath.Join(t.TempDir(), "outbox.db"), sick.srv.URL, well.srv.URL))
	env := []string{"TOKEN=" + token}
	const n = 100
	prepare(t, bin, p, env, n, "pedido.doente", "pedido.sao")
	relay := startProc(t, bin, env, "relay", "--config", p, "--listen", "127.0.0.1:0", "--log-format", "json")
	addr := waitAddr(t, relay.stderr, relay.done)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	sickRoute := "pedidos → http " + sick.srv.URL + "/m2m"
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		_, m := get("/metrics")
		return strings.Contains(m, `mensageria_route_state{app="pedidos",route="`+sickRoute+`",state="paused",types="pedido.doente"} 1`) ||
			strings.Contains(m, `mensageria_route_state{app="pedidos",route="`+sickRoute+`",state="probing",types="pedido.doente"} 1`)
	}, "the sick route paused on /metrics")
	var body string
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		var code int
		code, body = get("/readyz")
		if code != http.StatusOK {
			t.Fatalf("readyz %d while a route is paused: %s", code, body)
		}
		return strings.Contains(body, "route "+sickRoute+" (pedido.doente): paused")
	}, "/readyz to name the paused route")
	if !strings.Contains(body, "503") {
		t.Fatalf("readyz does not give the last error: %q", body)
	}
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return well.keys() == n }, "the healthy route to deliver everything")
	sick.down.Store(false)
	mensageriatest.Eventually(t, 60*time.Second, func() bool { return sick.keys() == n }, "the sick route to resume and deliver everything")
	_, metrics := get("/metrics")
	stopProc(t, relay)
	if strings.Contains(metrics, `outcome="dead"`) {
		t.Fatalf("dead letters from an outage:\n%s", metrics)
	}
	if !strings.Contains(metrics, `mensageria_route_state{app="pedidos",route="`+sickRoute+`",state="flowing",types="pedido.doente"} 1`) {
		t.Fatalf("the route is not flowing again:\n%s", metrics)
	}
	if rep := append(sick.repeats(), well.repeats()...); len(rep) > 0 {
		t.Fatalf("effects applied more than once: %v", rep)
	}
	log := relay.stderr.String()
	if !strings.Contains(log, `"msg":"route paused: `) || !strings.Contains(log, `"msg":"route resumed: `) {
		t.Fatalf("the pause and the resumption are not in the relay's log:\n%s", log)
	}
}
