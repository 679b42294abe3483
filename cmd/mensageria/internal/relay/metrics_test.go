package relay

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
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

// emptyOutbox is a driver whose outbox has no rows, for the metrics alone.
type emptyOutbox struct{ driver.Driver }

func (emptyOutbox) Stats(context.Context) ([]driver.TypeStats, error) { return nil, nil }
