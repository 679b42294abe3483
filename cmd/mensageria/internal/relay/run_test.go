package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon"
	"github.com/xadm/mensageria/cmd/mensageria/internal/daemon/daemontest"
	"github.com/xadm/mensageria/mensageriatest"
)

// sqliteConfig is a relay config of the app pedidos on a fresh SQLite
// file, whose route sends pedido.criado to url.
func sqliteConfig(t *testing.T, url string) (*config.Config, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "app.db")
	c, err := config.ParseConfig("relay.yaml", fmt.Appendf(nil, `database: sqlite:%s
app: pedidos
routes:
  - type: pedido.criado
    http: {url: %q, token: tok-0123456789abcdef}
`, path, url), envOf())
	if err != nil {
		t.Fatal(err)
	}
	return c, path
}

// logged is a logger that hands the attributes of each record whose
// message is msg to a channel, and drops the rest.
func logged(msg string) (*slog.Logger, <-chan map[string]string) {
	ch := make(chan map[string]string, 4)
	return slog.New(&watchHandler{msg: msg, ch: ch, Handler: slog.NewTextHandler(io.Discard, nil)}), ch
}

type watchHandler struct {
	slog.Handler
	msg string
	ch  chan map[string]string
}

func (h *watchHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		attrs := map[string]string{}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		select {
		case h.ch <- attrs:
		default:
		}
	}
	return nil
}

func (h *watchHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *watchHandler) WithGroup(string) slog.Handler      { return h }

// A type another app owns stops the start as a *daemon.ConflictError that names
// what could not be done and keeps the catalog's conflict, before
// anything is served.
func TestRunReportsAnotherAppsTypeAsConflict(t *testing.T) {
	c, path := sqliteConfig(t, "http://127.0.0.1:1/m2m")
	daemontest.OwnedBy(t, path, "faturamento", mensageria.Resource{Kind: mensageria.ResourceType, Name: "pedido.criado"})
	ctx := context.Background()

	log, served := logged("serving health and metrics")
	err := Run(ctx, Options{Config: c, Listen: "127.0.0.1:0", Shutdown: time.Second, Log: log})
	var ce *daemon.ConflictError
	if !errors.As(err, &ce) || ce.What != "start its relay" || !errors.Is(err, mensageria.ErrOwnerConflict) {
		t.Fatalf("Run with another app's type: %v", err)
	}
	if len(ce.Err.Conflicts) != 1 || ce.Err.Conflicts[0].Name != "pedido.criado" || ce.Err.Conflicts[0].App != "faturamento" {
		t.Fatalf("conflicts: %+v", ce.Err.Conflicts)
	}
	select {
	case a := <-served:
		t.Fatalf("the health endpoints were served on %s before the conflict stopped the start", a["addr"])
	default:
	}
}

// A receiver whose certificate the route does not trust stops the start
// with exit 2, naming the route and what failed, before the database is
// opened.
func TestRunRefusesAnUntrustedReceiver(t *testing.T) {
	rcv := httptest.NewUnstartedServer(http.NotFoundHandler())
	rcv.Config.ErrorLog = stdlog.New(io.Discard, "", 0) // the refused handshake
	rcv.StartTLS()
	defer rcv.Close()
	c, path := sqliteConfig(t, rcv.URL+"/m2m")
	c.Database = "sqlite:" + filepath.Join(filepath.Dir(path), "missing", "app.db")

	err := Run(context.Background(), Options{Config: c, Listen: "", Shutdown: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var de *daemon.Error
	var dest *DestinationError
	if !errors.As(err, &de) || de.Code != daemon.ExitUsage || !errors.As(err, &dest) {
		t.Fatalf("Run against an untrusted receiver: %v, want exit %d and a *DestinationError", err, daemon.ExitUsage)
	}
	if dest.Type != "pedido.criado" || !strings.Contains(dest.Reason, "not signed by a CA in the system's CAs") {
		t.Fatalf("destination error: %+v", dest)
	}
}

// Run serves the health endpoints with the route's state until its
// context ends, then stops and returns nil.
func TestRunServesUntilItsContextEnds(t *testing.T) {
	rcv := httptest.NewServer(http.NotFoundHandler())
	defer rcv.Close()
	c, _ := sqliteConfig(t, rcv.URL+"/m2m")
	log, served := logged("serving health and metrics")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Config: c, Listen: "127.0.0.1:0", Shutdown: 5 * time.Second, Migrate: true, Log: log})
	}()
	var addr string
	select {
	case a := <-served:
		addr = a["addr"]
	case err := <-done:
		t.Fatalf("Run ended before serving: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not serve its health endpoints")
	}
	get := func(p string) (int, string) {
		resp, err := http.Get("http://" + addr + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var readyz string
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		code, body := get("/readyz")
		readyz = fmt.Sprintf("%d %s", code, body)
		return code == http.StatusOK
	}, "/readyz to answer 200, last %s", func() string { return readyz })
	if code, body := get("/metrics"); code != http.StatusOK ||
		!strings.Contains(body, `mensageria_route_state{app="pedidos",route=`) ||
		!strings.Contains(body, `mensageria_relay_leader{app="pedidos"} 1`) {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after its context ended: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop when its context ended")
	}
}
