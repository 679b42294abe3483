package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriatest"
)

// transferApp writes the config of one app on s's database, routing types
// to url.
func (s *shared) transferApp(app, url string, types ...string) string {
	s.t.Helper()
	var routes strings.Builder
	for _, typ := range types {
		fmt.Fprintf(&routes, "  - type: %s\n    http: {url: %s, token: ${TEST_TOKEN}}\n", typ, url)
	}
	return writeFile(s.t, fmt.Sprintf("database: %s\nschema: %s\napp: %s\nroutes:\n%s"+
		"relay: {batch: 20, lease: 2s, poll_interval: 50ms, backoff_base: 10ms, backoff_max: 50ms}\n",
		s.db, s.schema, app, routes.String()))
}

// `owners transfer` while both apps' relays run, on SQLite and PostgreSQL:
// the old owner's relay stops claiming the moved type within one lease,
// logs it naming the new owner, and its /metrics and `status` say so, while
// its other type keeps flowing; the new owner's relay (deployed with a
// config routing the type, as the transfer's note says) delivers every
// message of the type enqueued after that, and the old destination gets
// none of them.
func TestOwnersTransferReachesRunningRelays(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *shared) {
		const moved, kept, theirs = "pedido.criado", "pedido.enviado", "fatura.emitida"
		bin := binary(t)
		env := []string{"TEST_TOKEN=tok"}
		rcvA, rcvB := newReceiver(t), newReceiver(t)
		cfgA := s.transferApp("pedidos", rcvA.srv.URL+"/m2m", moved, kept)
		cfgB := s.transferApp("faturamento", rcvB.srv.URL+"/m2m", theirs)
		cfgB2 := s.transferApp("faturamento", rcvB.srv.URL+"/m2m", theirs, moved)
		as := func(cfg string, args ...string) result {
			t.Helper()
			return runBin(t, bin, env, "", append(args, "--config", cfg)...)
		}
		must(t, "migrate up", as(cfgA, "migrate", "up"), 0)
		relay := func(cfg string) *proc {
			t.Helper()
			p := startProc(t, bin, env, "relay", "--config", cfg, "--listen", "127.0.0.1:0", "--log-format", "json")
			t.Cleanup(func() { _ = p.cmd.Process.Kill() })
			return p
		}
		a := relay(cfgA)
		addrA := waitAddr(t, a.stderr, a.done)
		b := relay(cfgB)
		waitAddr(t, b.stderr, b.done)
		must(t, "enqueue before", as(cfgA, "enqueue", "-t", moved, "-k", "before"), 0)
		mensageriatest.Eventually(t, 20*time.Second, func() bool { return rcvA.count("before") == 1 }, "the first owner delivers")

		r := as(cfgA, "owners", "transfer", "type", moved, "--from", "pedidos", "--to", "faturamento")
		must(t, "transfer while both relays run", r, 0, `moved from app "pedidos" to app "faturamento"`, "running relays pick the change up within one lease")
		movedAt := time.Now()
		mensageriatest.Eventually(t, 10*time.Second, func() bool {
			return strings.Contains(a.stderr.String(), "no longer gives this app a type it routes")
		}, "the old owner's relay logs that it stops claiming the type")
		if took := time.Since(movedAt); took > 3*time.Second {
			t.Errorf("the old relay noticed %s after the transfer; its lease is 2s", took)
		}
		if log := a.stderr.String(); !strings.Contains(log, `"type":"`+moved+`"`) || !strings.Contains(log, `"owner":"faturamento"`) {
			t.Fatalf("the log line does not name the type and its new owner:\n%s", log)
		}
		m, err := getWithClient("http://" + addrA + "/metrics")
		if err != nil || !strings.Contains(m, `mensageria_relay_type_claimed{app="pedidos",route=`) ||
			!strings.Contains(m, `type="`+moved+`"} 0`) || !strings.Contains(m, `type="`+kept+`"} 1`) {
			t.Fatalf("the old relay's /metrics do not say which types it claims (%v):\n%s", err, m)
		}
		must(t, "status of the old owner", as(cfgA, "status"), 0, "owned by app faturamento", "running relays do not claim it")

		// The new owner deploys a config that routes the type.
		stopProc(t, b)
		b = relay(cfgB2)
		waitAddr(t, b.stderr, b.done)
		drv := s.open()
		producer, err := mensageria.New(drv, &mensageria.Config{App: "faturamento", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Registry: mensageria.NewRegistry().MustRegister(moved, mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil }))})
		if err != nil {
			t.Fatal(err)
		}
		const n = 60
		for i := range n {
			if _, err := producer.Enqueue(context.Background(), mensageria.Message{Type: moved, Key: fmt.Sprintf("after-%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		must(t, "enqueue of the kept type", as(cfgA, "enqueue", "-t", kept, "-k", "kept"), 0)
		mensageriatest.Eventually(t, 30*time.Second, func() bool {
			for i := range n {
				if rcvB.count(fmt.Sprintf("after-%d", i)) == 0 {
					return false
				}
			}
			return true
		}, "the new owner delivers every new message")
		mensageriatest.Eventually(t, 20*time.Second, func() bool { return rcvA.count("kept") == 1 }, "the old owner's other type keeps flowing")
		for i := range n {
			if k := fmt.Sprintf("after-%d", i); rcvA.count(k) != 0 {
				t.Fatalf("%s went to the old owner's destination", k)
			}
		}
		stopProc(t, a)
		stopProc(t, b)
	})
}
