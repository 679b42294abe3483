package cli

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/cmd/mensageria/internal/testca"
	"github.com/xadm/mensageria/mensageriatest"
)

// Tokens rotate with no restart: the file is re-read when it changes, the
// new token is accepted beside the old, then the old is dropped; a file
// that cannot be used is refused whole and the tokens in force stay.
func TestReceiveTokenRotationWithoutRestart(t *testing.T) {
	b := sqliteBackend(t)
	file := filepath.Join(t.TempDir(), "tokens")
	write := func(s string) {
		t.Helper()
		// Written aside and renamed in, as a deploy tool or a Kubernetes
		// secret replaces it.
		tmp := file + ".new"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write("# senders' tokens\nold-token-0123456789\n")
	d := startReceive(t, receiveConfig(t, b, "  tokens_file: "+file+"\n  tokens_check: 50ms", "1h"), nil)
	key, accepted := 0, 0
	as := func(tok string) int {
		key++
		e, _ := envelope(t, "pedido.criado", fmt.Sprint("k-", key), `{}`, time.Now())
		a := deliver(t, d.url, tok, e)
		if a.status == 200 {
			accepted++
		}
		return a.status
	}
	if as("old-token-0123456789") != 200 || as("new-token-0123456789") != 401 {
		t.Fatal("the first file is not what is accepted")
	}
	write("old-token-0123456789\nnew-token-0123456789\n")
	mensageriatest.Eventually(t, 20*time.Second, func() bool { return as("new-token-0123456789") == 200 }, "the new token accepted")
	if as("old-token-0123456789") != 200 {
		t.Fatal("the old token was dropped while both are listed")
	}
	write("new-token-0123456789\n")
	mensageriatest.Eventually(t, 20*time.Second, func() bool { return as("old-token-0123456789") == 401 }, "the old token refused")
	if as("new-token-0123456789") != 200 {
		t.Fatal("the new token stopped working")
	}
	// A bad file changes nothing, and says so.
	write("new-token-0123456789\nnot a token\n")
	mensageriatest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(d.logs.String(), "token reload refused") }, "the bad file refused")
	write("# nothing left\n")
	mensageriatest.Eventually(t, 20*time.Second, func() bool { return strings.Contains(d.logs.String(), "holds no token") }, "the empty file refused")
	if as("new-token-0123456789") != 200 || as("old-token-0123456789") != 401 {
		t.Fatal("a refused file changed the tokens in force")
	}
	m := metricsOf(t, "http://"+d.addr+"/metrics")
	for _, want := range []string{`mensageria_receive_token_reloads_total{app="faturamento",result="ok"} 2`, `mensageria_receive_token_reloads_total{app="faturamento",result="error"}`, `mensageria_receive_tokens{app="faturamento"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if n := b.count(t, "SELECT count(*) FROM {s}.inbox_queue"); n != accepted {
		t.Fatalf("%d rows for %d accepted deliveries", n, accepted)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

// A sender that trickles its body, or stops sending it, is cut off at the
// read deadline: its request stores nothing and its connection is closed,
// while other requests go on being served. The same for one that never
// finishes its headers.
func TestReceiveSlowBodyIsCutOff(t *testing.T) {
	b := sqliteBackend(t)
	d := startReceive(t, receiveConfig(t, b, "  tokens: [tok-0123456789abcdef]\n  read_header_timeout: 300ms\n  read_timeout: 500ms\n  write_timeout: 5s", "1h"), nil)
	good, _ := envelope(t, "pedido.criado", "slow-1", `{"n":1}`, time.Now())

	// The body: headers and the first bytes, then nothing.
	c, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer tok-0123456789abcdef\r\nContent-Type: application/json\r\nX-Request-Id: slow\r\nContent-Length: %d\r\n\r\n%s", len(good), good[:10])
	// Without a read deadline this waits for ever (the test's own deadline
	// ends it as a failure); with one, the daemon answers or hangs up.
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	status, err := bufio.NewReader(c).ReadString('\n')
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the daemon kept waiting for a body that never came")
	}
	if strings.HasPrefix(status, "HTTP/1.1 2") {
		t.Fatalf("a request whose body never came was answered %q", status)
	}
	t.Logf("a stalled body got %q (%v)", strings.TrimSpace(status), err)

	// The headers: a request line, then nothing.
	h, err := net.Dial("tcp", d.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	fmt.Fprintf(h, "POST / HTTP/1.1\r\nHost: x\r\n")
	_ = h.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := bufio.NewReader(h).ReadString('\n')
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("the daemon kept waiting for headers that never came")
	}
	if strings.HasPrefix(line, "HTTP/1.1 2") {
		t.Fatalf("unfinished headers were answered %q", line)
	}

	if n := b.count(t, "SELECT count(*) FROM {s}.inbox_queue") + b.count(t, "SELECT count(*) FROM {s}.inbox"); n != 0 {
		t.Fatalf("a cut-off request stored %d rows", n)
	}
	if a := deliver(t, d.url, "tok-0123456789abcdef", good); a.status != 200 || a.body != `{"status":"applied"}` {
		t.Fatalf("the same message, sent whole: %d %s", a.status, a.body)
	}
}

// With TLS and a client CA, a connection without a certificate of that CA
// fails before any HTTP; with one, the token is still required. The probes
// are served on --listen for a prober that has no client certificate.
func TestReceiveTLSWithClientCertificates(t *testing.T) {
	b := sqliteBackend(t)
	ca, other := testca.New(t, "ca"), testca.New(t, "other")
	srv := ca.Leaf(t, "receiver", true)
	cli := ca.Client(t, "relay-pedidos")
	bad := other.Client(t, "stranger")
	cfg := receiveConfig(t, b, fmt.Sprintf("  tokens: [tok-0123456789abcdef]\n  tls: {cert_file: %s, key_file: %s, client_ca_file: %s}", srv.CertFile, srv.KeyFile, ca.CAFile), "1h")
	d := startReceiveWithHealth(t, cfg)
	if !strings.HasPrefix(d.url, "https://") {
		t.Fatalf("url %s is not https", d.url)
	}
	good, _ := envelope(t, "pedido.criado", "tls-1", `{}`, time.Now())

	for _, c := range []struct {
		name   string
		client *http.Client
	}{
		{"no client certificate", ca.HTTPClient(nil)},
		{"a certificate of another CA", ca.HTTPClient(&bad)},
	} {
		req, _ := http.NewRequest(http.MethodPost, d.url, strings.NewReader(good))
		req.Header.Set("Authorization", "Bearer tok-0123456789abcdef")
		req.Header.Set("Content-Type", "application/json")
		if resp, err := c.client.Do(req); err == nil {
			resp.Body.Close()
			t.Errorf("%s: answered %d, want the handshake refused", c.name, resp.StatusCode)
		}
	}
	plain := &http.Client{Timeout: 20 * time.Second}
	if resp, err := plain.Post(strings.Replace(d.url, "https://", "http://", 1), "application/json", strings.NewReader(good)); err == nil {
		if resp.StatusCode < 400 {
			t.Errorf("plain HTTP to the TLS listener: %d", resp.StatusCode)
		}
		resp.Body.Close()
	}
	if n := b.count(t, "SELECT count(*) FROM {s}.inbox_queue"); n != 0 {
		t.Fatalf("refused connections stored %d rows", n)
	}
	ok := ca.HTTPClient(&cli)
	if a := deliverWith(t, ok, d.url, "", "application/json", good); a.status != 401 {
		t.Fatalf("a client certificate without a token: %d %s", a.status, a.body)
	}
	if a := deliverWith(t, ok, d.url, "tok-0123456789abcdef", "application/json", good); a.status != 200 || a.body != `{"status":"applied"}` {
		t.Fatalf("certificate and token: %d %s", a.status, a.body)
	}
	if a := sendTo(t, nil, http.MethodGet, "http://"+d.health+"/readyz", http.Header{}, ""); a.status != 200 {
		t.Fatalf("readyz on --listen: %d %s", a.status, a.body)
	}
	if m := metricsOf(t, "http://"+d.health+"/metrics"); !strings.Contains(m, `mensageria_inbox_queue_pending{app="faturamento",consumer="fat"} 1`) {
		t.Fatalf("metrics on --listen:\n%s", m)
	}
}

type rdaemonHealth struct {
	*rdaemon
	health string
}

func startReceiveWithHealth(t *testing.T, cfg string) rdaemonHealth {
	t.Helper()
	d := startReceive(t, cfg, nil, "--listen", "127.0.0.1:0")
	m := addrLog.FindStringSubmatch(d.logs.String())
	if m == nil {
		t.Fatalf("no health address logged:\n%s", d.logs.String())
	}
	return rdaemonHealth{d, m[1]}
}

// Applied rows go with their dedup records once older than the consumer's
// window, by the daemon's own purge; pending and dead rows stay.
func TestReceivePurgesAppliedRowsByWindow(t *testing.T) {
	eachReceiveBackend(t, func(t *testing.T, b *rbackend) {
		d := startReceive(t, receiveConfig(t, b, "  tokens: [tok-0123456789abcdef]\n  purge_interval: 100ms", "2s"), nil)
		for _, k := range []string{"applied", "pending", "dead"} {
			e, _ := envelope(t, "pedido.criado", k, `{}`, time.Now())
			if a := deliver(t, d.url, "tok-0123456789abcdef", e); a.status != 200 {
				t.Fatalf("deliver: %d %s", a.status, a.body)
			}
		}
		// The app's marks, by hand.
		b.exec(t, "UPDATE {s}.inbox_queue SET state = 'applied' WHERE key = 'applied'")
		b.exec(t, "UPDATE {s}.inbox_queue SET state = 'dead' WHERE key = 'dead'")
		// The row and its dedup record go in two statements of a purge
		// pass, each with its own now(): the window may end between them,
		// and the record then goes with the next pass.
		mensageriatest.Eventually(t, 30*time.Second, func() bool {
			return b.count(t, "SELECT count(*) FROM {s}.inbox_queue WHERE key = 'applied'") == 0 &&
				b.count(t, "SELECT count(*) FROM {s}.inbox WHERE consumer = 'fat' AND key = 'applied'") == 0
		}, "the applied row and its dedup record purged")
		if n := b.count(t, "SELECT count(*) FROM {s}.inbox_queue WHERE key IN ('pending', 'dead')"); n != 2 {
			t.Fatalf("%d of the pending and dead rows left, want both", n)
		}
		// Its key may come again as a new row; a fresh message.
		e, _ := envelope(t, "pedido.criado", "applied", `{"again":true}`, time.Now())
		if a := deliver(t, d.url, "tok-0123456789abcdef", e); a.status != 200 || a.body != `{"status":"applied"}` {
			t.Fatalf("the purged key again: %d %s", a.status, a.body)
		}
	})
}
