package drivertest

import (
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
)

func (s *suite) routeTests() []test {
	setStates := func(t *testing.T, d driver.Driver, p driver.RouteStatesParams) {
		t.Helper()
		if err := d.SetRouteStates(ctxOf(t), p); err != nil {
			t.Fatalf("SetRouteStates(%+v): %v", p, err)
		}
	}
	states := func(t *testing.T, d driver.Driver, app string) []driver.RouteState {
		t.Helper()
		out, err := d.RouteStates(ctxOf(t), app)
		if err != nil {
			t.Fatalf("RouteStates(%q): %v", app, err)
		}
		return out
	}
	types := func(ss []driver.RouteState) []string {
		var out []string
		for _, s := range ss {
			out = append(out, s.Type)
		}
		return out
	}
	return []test{
		{"RecordedAndReadByAnotherProcess", func(t *testing.T, h *Harness) {
			d := h.Driver
			since := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
			until := since.Add(90 * time.Second)
			setStates(t, d, driver.RouteStatesParams{App: "billing", States: []driver.RouteState{
				{Type: "b.two", App: "billing", Route: "billing → http https://x/m2m", State: "paused", Since: since, Until: until, Failures: 7, LastError: "http 401 Unauthorized"},
				{Type: "b.one", App: "billing", Route: "billing → http https://x/m2m", State: "paused", Since: since, Until: until, Failures: 7, LastError: "http 401 Unauthorized"},
			}})
			setStates(t, d, driver.RouteStatesParams{App: "stock", States: []driver.RouteState{
				{Type: "s.one", App: "stock", Route: "stock → kafka topic s", State: "flowing", Since: since},
			}})
			got := states(t, reopen(t, h), "billing")
			if g := types(got); len(g) != 2 || g[0] != "b.one" || g[1] != "b.two" {
				t.Fatalf("billing's states by type: %v, want [b.one b.two]", g)
			}
			b := got[0]
			if b.App != "billing" || b.Route != "billing → http https://x/m2m" || b.State != "paused" || b.Failures != 7 ||
				b.LastError != "http 401 Unauthorized" || !b.Since.Equal(since) || !b.Until.Equal(until) {
				t.Fatalf("read back %+v, want what was written (since %s, until %s)", b, since, until)
			}
			near(t, "UpdatedAt", b.UpdatedAt)
			all := states(t, d, "")
			if g := types(all); len(g) != 3 || g[2] != "s.one" {
				t.Fatalf("every app's states: %v", g)
			}
			if !all[2].Until.IsZero() || all[2].LastError != "" {
				t.Fatalf("a flowing route without failures read back as %+v, want no Until and no error", all[2])
			}
		}},
		{"TransitionReplacesAndReplacePrunes", func(t *testing.T, h *Harness) {
			d := h.Driver
			now := time.Now().Truncate(time.Microsecond)
			setStates(t, d, driver.RouteStatesParams{App: "a", Replace: true, States: []driver.RouteState{
				{Type: "x", App: "a", Route: "a → d", State: "paused", Since: now, Until: now.Add(time.Second), Failures: 5, LastError: "503"},
				{Type: "y", App: "a", Route: "a → e", State: "flowing", Since: now},
			}})
			setStates(t, d, driver.RouteStatesParams{App: "other", States: []driver.RouteState{
				{Type: "z", App: "other", Route: "other → f", State: "probing", Since: now},
			}})
			// The route resumes: only its row changes.
			setStates(t, d, driver.RouteStatesParams{App: "a", States: []driver.RouteState{
				{Type: "x", App: "a", Route: "a → d", State: "flowing", Since: now.Add(2 * time.Second)},
			}})
			got := states(t, d, "a")
			if len(got) != 2 || got[0].State != "flowing" || !got[0].Until.IsZero() || got[0].Failures != 0 || got[0].LastError != "" || got[1].Type != "y" {
				t.Fatalf("after the transition: %+v", got)
			}
			// A restarted relay of app a that routes only x replaces its
			// rows: y goes, the other app's z stays.
			setStates(t, d, driver.RouteStatesParams{App: "a", Replace: true, States: []driver.RouteState{
				{Type: "x", App: "a", Route: "a → d", State: "flowing", Since: now.Add(3 * time.Second)},
			}})
			if g := types(states(t, d, "")); len(g) != 2 || g[0] != "x" || g[1] != "z" {
				t.Fatalf("after a replacing write: %v, want [x z]", g)
			}
		}},
		{"ReplaceWithNoTypeClearsTheApp", func(t *testing.T, h *Harness) {
			d := h.Driver
			now := time.Now().Truncate(time.Microsecond)
			setStates(t, d, driver.RouteStatesParams{App: "a", States: []driver.RouteState{
				{Type: "x", App: "a", Route: "a → d", State: "paused", Since: now},
				{Type: "y", App: "a", Route: "a → e", State: "flowing", Since: now},
			}})
			setStates(t, d, driver.RouteStatesParams{App: "other", States: []driver.RouteState{
				{Type: "z", App: "other", Route: "other → f", State: "flowing", Since: now},
			}})
			// A relay of app a restarted with no route left replaces its
			// rows with none: a's go, the other app's stay.
			setStates(t, d, driver.RouteStatesParams{App: "a", Replace: true})
			if g := types(states(t, d, "")); len(g) != 1 || g[0] != "z" {
				t.Fatalf("after replacing with no type: %v, want [z]", g)
			}
		}},
	}
}
