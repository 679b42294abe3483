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
// by `status`, another process: a paused route gets a line saying what it
// means, with its last error and next probe, and `--json` carries them;
// a flowing route adds nothing to the text.
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
	if r.code != 0 || !strings.Contains(r.out, "pedido.criado: route "+route+" paused since "+since.Format(time.RFC3339)) ||
		!strings.Contains(r.out, "next probe at "+until.Format(time.RFC3339)) || !strings.Contains(r.out, "http 401 Unauthorized") ||
		strings.Contains(r.out, "pedido.ordenado: route") {
		t.Fatalf("status text:\n%s", r.out)
	}
	r = c("status", "--json")
	var st Status
	if err := json.Unmarshal([]byte(r.out), &st); err != nil || r.code != 0 {
		t.Fatalf("status --json: %v %+v", err, r)
	}
	got := map[string]*StatusRoute{}
	for _, ty := range st.Types {
		got[ty.Type] = ty.Route
	}
	if a := got["pedido.criado"]; a == nil || a.State != "paused" || a.Failures != 9 || a.Until == nil || !a.Until.Equal(until) || a.Name != route {
		t.Fatalf("paused route in --json: %+v", a)
	}
	if b := got["pedido.ordenado"]; b == nil || b.State != "flowing" || b.Until != nil {
		t.Fatalf("flowing route in --json: %+v", b)
	}
}
