package cli

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
)

// The routes' flow control as the relay serves it: one-hot state gauges,
// failures in a row and max_rate on /metrics, and a paused route named in
// /readyz's body while the relay stays ready.
func TestRouteHealthServed(t *testing.T) {
	now := time.Now()
	routes := []mensageria.RouteHealth{
		{Route: "pedidos → http https://billing/m2m", Types: []string{"pedido.criado", "pedido.pago"}, State: mensageria.RoutePaused,
			Since: now.Add(-30 * time.Second), Until: now.Add(20 * time.Second), Failures: 6, LastError: "503 Service Unavailable", RetryAfter: true},
		{Route: "pedidos → kafka topic pedidos", Types: []string{"pedido.status"}, State: mensageria.RouteFlowing, MaxRate: 50},
	}
	m := newMetrics("pedidos", emptyOutbox{}, nil, nil)
	m.routes = func() []mensageria.RouteHealth { return routes }
	ready := func(context.Context) error { return nil }
	srv := httptest.NewServer(serveMux(m, ready))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/readyz")
	if code != http.StatusOK || !strings.HasPrefix(body, "ready\n") ||
		!strings.Contains(body, "route pedidos → http https://billing/m2m (pedido.criado, pedido.pago): paused for 30s, probe in 20s (the destination's Retry-After); 6 failures in a row, last: 503 Service Unavailable") ||
		strings.Contains(body, "kafka") {
		t.Fatalf("readyz: %d %q", code, body)
	}
	code, metrics := get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("metrics: %d %s", code, metrics)
	}
	for _, want := range []string{
		`mensageria_route_state{app="pedidos",route="pedidos → http https://billing/m2m",state="paused",types="pedido.criado,pedido.pago"} 1`,
		`mensageria_route_state{app="pedidos",route="pedidos → http https://billing/m2m",state="flowing",types="pedido.criado,pedido.pago"} 0`,
		`mensageria_route_state{app="pedidos",route="pedidos → http https://billing/m2m",state="probing",types="pedido.criado,pedido.pago"} 0`,
		`mensageria_route_failures{app="pedidos",route="pedidos → http https://billing/m2m",types="pedido.criado,pedido.pago"} 6`,
		`mensageria_route_state{app="pedidos",route="pedidos → kafka topic pedidos",state="flowing",types="pedido.status"} 1`,
		`mensageria_route_max_rate{app="pedidos",route="pedidos → kafka topic pedidos",types="pedido.status"} 50`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(metrics, `mensageria_route_max_rate{app="pedidos",route="pedidos → http`) {
		t.Errorf("a max_rate for a route without one:\n%s", metrics)
	}
}

// 'mensageria status' shows each route's state as the app's relay last
// recorded it, the types of one route together.
func TestStatusShowsRouteStates(t *testing.T) {
	db := "sqlite:" + filepath.Join(t.TempDir(), "m.db")
	p := writeConfig(t, db, "mensageria", "http://127.0.0.1:1/m2m")
	c := func(args ...string) result { t.Helper(); return run(t, "", tokEnv, append(args, "--config", p)...) }
	must(t, "migrate up", c("migrate", "up"), 0)
	r := c("status", "--json")
	var st Status
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || st.Routes == nil || len(st.Routes) != 0 {
		t.Fatalf("status before any relay: %v %+v", err, r)
	}
	b, err := openBackend(context.Background(), db, "mensageria")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	since := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	const route = "pedidos → http http://127.0.0.1:1/m2m"
	if err := b.drv.SetRouteStates(context.Background(), driver.RouteStatesParams{App: "pedidos", States: []driver.RouteState{
		{Type: "pedido.criado", App: "pedidos", Route: route, State: "paused", Since: since, Until: until, Failures: 7, LastError: "connection refused"},
		{Type: "pedido.ordenado", App: "pedidos", Route: route, State: "flowing", Since: since},
		{Type: "outro.tipo", App: "outro", Route: "outro → nats subject x", State: "paused", Since: since},
	}}); err != nil {
		t.Fatal(err)
	}
	r = c("status", "--json")
	st = Status{}
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || len(st.Routes) != 2 {
		t.Fatalf("status: %v %+v", err, r)
	}
	paused, flowing := st.Routes[0], st.Routes[1]
	if paused.State != "paused" || strings.Join(paused.Types, ",") != "pedido.criado" || paused.Failures != 7 || paused.LastError != "connection refused" ||
		paused.Until == nil || !paused.Until.Equal(until) || !paused.Since.Equal(since) || flowing.State != "flowing" || flowing.Until != nil {
		t.Fatalf("routes: %+v", st.Routes)
	}
	r = c("status")
	if r.code != 0 || !strings.Contains(r.out, "ROUTE") || !strings.Contains(r.out, "paused (probe in ") || !strings.Contains(r.out, "connection refused") || strings.Contains(r.out, "outro") {
		t.Fatalf("status text: %+v", r)
	}
}

// emptyOutbox is a driver whose outbox has no rows, for the metrics alone.
type emptyOutbox struct{ nopDriver }

func (emptyOutbox) Stats(context.Context) ([]driver.TypeStats, error) { return nil, nil }
