package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
)

// TestStatusShowsPausedRoutes: the route states a relay recorded are read
// by `status`, another process: the routes table shows a paused route with
// its next probe and last error, and `--json` carries every route with its
// types.
func TestStatusShowsPausedRoutes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	p := writeConfig(t, "sqlite:"+path, "mensageria", "http://127.0.0.1:1/m2m")
	c := func(args ...string) result {
		t.Helper()
		return run(t, "", tokEnv, append(args, "--config", p)...)
	}
	for _, args := range [][]string{{"migrate", "up"}, {"owners", "register"}} {
		if r := c(args...); r.code != 0 {
			t.Fatalf("%v: %+v", args, r)
		}
	}
	drv, err := sqlite.Open(path, &sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	since := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	until := since.Add(2 * time.Minute)
	route := "pedidos → http http://127.0.0.1:1/m2m"
	if err := drv.SetRouteStates(context.Background(), driver.RouteStatesParams{App: "pedidos", Replace: true, States: []driver.RouteState{
		{Type: "pedido.criado", App: "pedidos", Route: route, State: "paused", Since: since, Until: until, Failures: 9, LastError: "http 401 Unauthorized"},
		{Type: "pedido.ordenado", App: "pedidos", Route: route, State: "flowing", Since: since},
	}}); err != nil {
		t.Fatal(err)
	}
	r := c("status")
	if r.code != 0 || !strings.Contains(r.out, route) || !strings.Contains(r.out, "paused (probe in") ||
		!strings.Contains(r.out, "http 401 Unauthorized") {
		t.Fatalf("status text:\n%s", r.out)
	}
	r = c("status", "--json")
	var st Status
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || r.code != 0 {
		t.Fatalf("status --json: %v %+v", err, r)
	}
	got := map[string]StatusRoute{}
	for _, rt := range st.Routes {
		got[strings.Join(rt.Types, ",")] = rt
	}
	if a := got["pedido.criado"]; a.State != "paused" || a.Failures != 9 || a.Until == nil || !a.Until.Equal(until) || a.Route != route || a.LastError != "http 401 Unauthorized" {
		t.Fatalf("paused route in --json: %+v (all: %+v)", a, st.Routes)
	}
	if b := got["pedido.ordenado"]; b.State != "flowing" || b.Until != nil || b.Route != route {
		t.Fatalf("flowing route in --json: %+v (all: %+v)", b, st.Routes)
	}
}
