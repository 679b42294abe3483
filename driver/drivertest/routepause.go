package drivertest

import (
	"errors"
	"strings"
	"testing"

	"github.com/xadm/mensageria/driver"
)

// routePauseTests check an operator's pause of a route as every process
// of every app sees it: recorded with who and why, read back by another
// process, replaced by a second pause without losing its start, deleted
// by a resume, and refused whole when a field is missing or too long.
func (s *suite) routePauseTests() []test {
	pauser := func(t *testing.T, d driver.Driver) driver.RoutePauser {
		t.Helper()
		p, ok := d.(driver.RoutePauser)
		if !ok {
			t.Skipf("%T records no operator pauses (driver.RoutePauser)", d)
		}
		return p
	}
	list := func(t *testing.T, p driver.RoutePauser, app string) []driver.RoutePause {
		t.Helper()
		out, err := p.RoutePauses(ctxOf(t), app)
		if err != nil {
			t.Fatalf("RoutePauses(%q): %v", app, err)
		}
		return out
	}
	pause := func(t *testing.T, p driver.RoutePauser, params driver.PauseRouteParams) driver.RoutePause {
		t.Helper()
		got, err := p.PauseRoute(ctxOf(t), params)
		if err != nil {
			t.Fatalf("PauseRoute(%+v): %v", params, err)
		}
		return got
	}
	return []test{
		{"RecordedAndReadByAnotherProcess", func(t *testing.T, h *Harness) {
			p := pauser(t, h.Driver)
			first := pause(t, p, driver.PauseRouteParams{App: "billing", Type: "b.two", PausedBy: "cli:ana", Reason: "billing's receiver is down for its upgrade until 14:00"})
			if first.Type != "b.two" || first.App != "billing" || first.PausedBy != "cli:ana" || !strings.HasPrefix(first.Reason, "billing's receiver") {
				t.Fatalf("PauseRoute returned %+v, want what was given", first)
			}
			near(t, "PausedAt", first.PausedAt)
			pause(t, p, driver.PauseRouteParams{App: "billing", Type: "b.one", PausedBy: "console:ops", Reason: "maintenance"})
			pause(t, p, driver.PauseRouteParams{App: "stock", Type: "s.one", PausedBy: "cli:rui", Reason: "stock's receiver moves"})

			other := pauser(t, reopen(t, h))
			got := list(t, other, "billing")
			if len(got) != 2 || got[0].Type != "b.one" || got[1].Type != "b.two" {
				t.Fatalf("billing's pauses read by another process: %+v, want b.one and b.two by type", got)
			}
			if got[1].PausedBy != "cli:ana" || got[1].Reason != first.Reason || !got[1].PausedAt.Equal(first.PausedAt) {
				t.Fatalf("read back %+v, want %+v", got[1], first)
			}
			if all := list(t, other, ""); len(all) != 3 || all[2].Type != "s.one" || all[2].App != "stock" {
				t.Fatalf("every app's pauses: %+v", all)
			}
		}},
		{"PausedAgainKeepsItsStart", func(t *testing.T, h *Harness) {
			p := pauser(t, h.Driver)
			first := pause(t, p, driver.PauseRouteParams{App: "billing", Type: "b.one", PausedBy: "cli:ana", Reason: "upgrade"})
			again := pause(t, p, driver.PauseRouteParams{App: "billing", Type: "b.one", PausedBy: "cli:rui", Reason: "upgrade runs late"})
			if again.PausedBy != "cli:rui" || again.Reason != "upgrade runs late" || !again.PausedAt.Equal(first.PausedAt) {
				t.Fatalf("paused again: %+v, want the new operator and reason and the first start %s", again, first.PausedAt)
			}
			if got := list(t, p, "billing"); len(got) != 1 || got[0].Reason != "upgrade runs late" {
				t.Fatalf("pauses after pausing twice: %+v, want one with the latest reason", got)
			}
		}},
		{"ResumeDeletesThePause", func(t *testing.T, h *Harness) {
			p := pauser(t, h.Driver)
			pause(t, p, driver.PauseRouteParams{App: "billing", Type: "b.one", PausedBy: "cli:ana", Reason: "upgrade"})
			pause(t, p, driver.PauseRouteParams{App: "billing", Type: "b.two", PausedBy: "cli:ana", Reason: "upgrade"})
			resumed, found, err := p.ResumeRoute(ctxOf(t), "b.one")
			if err != nil || !found || resumed.Type != "b.one" || resumed.PausedBy != "cli:ana" {
				t.Fatalf("ResumeRoute(b.one) = %+v, %v, %v; want the pause it deleted", resumed, found, err)
			}
			if _, found, err := p.ResumeRoute(ctxOf(t), "b.one"); err != nil || found {
				t.Fatalf("ResumeRoute of a type not paused: found %v, err %v; want not found and no error", found, err)
			}
			if got := list(t, p, ""); len(got) != 1 || got[0].Type != "b.two" {
				t.Fatalf("pauses after resuming b.one: %+v, want b.two alone", got)
			}
		}},
		{"RefusedWhole", func(t *testing.T, h *Harness) {
			p := pauser(t, h.Driver)
			ok := driver.PauseRouteParams{App: "billing", Type: "b.one", PausedBy: "cli:ana", Reason: "upgrade"}
			for name, mod := range map[string]func(*driver.PauseRouteParams){
				"no reason":         func(p *driver.PauseRouteParams) { p.Reason = "  " },
				"no operator":       func(p *driver.PauseRouteParams) { p.PausedBy = "" },
				"no app":            func(p *driver.PauseRouteParams) { p.App = "" },
				"no type":           func(p *driver.PauseRouteParams) { p.Type = "" },
				"reason too long":   func(p *driver.PauseRouteParams) { p.Reason = strings.Repeat("é", driver.MaxPauseReasonLen/2+1) },
				"operator too long": func(p *driver.PauseRouteParams) { p.PausedBy = strings.Repeat("a", driver.MaxPausedByLen+1) },
				"NUL in reason":     func(p *driver.PauseRouteParams) { p.Reason = "up\x00grade" },
				"invalid UTF-8":     func(p *driver.PauseRouteParams) { p.Reason = "up\xffgrade" },
			} {
				bad := ok
				mod(&bad)
				_, err := p.PauseRoute(ctxOf(t), bad)
				var pe *driver.PauseRouteError
				if !errors.As(err, &pe) {
					t.Errorf("%s: PauseRoute = %v, want a *driver.PauseRouteError", name, err)
				}
			}
			if got := list(t, p, ""); len(got) != 0 {
				t.Fatalf("refused pauses stored %+v", got)
			}
			long := ok
			long.Reason = strings.Repeat("é", driver.MaxPauseReasonLen/2)
			if got := pause(t, p, long); got.Reason != long.Reason {
				t.Fatalf("a reason of exactly %d bytes read back as %d bytes", driver.MaxPauseReasonLen, len(got.Reason))
			}
		}},
	}
}
