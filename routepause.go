package mensageria

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/xadm/mensageria/driver"
)

// OperatorPause is an operator's pause of one of a route's types
// (docs/adr/0032-route-pause.md): the app's relays claim nothing of the
// type until an operator resumes it, its messages stay pending, and the
// relay stays ready, since an intended pause is not a failure. Pauses
// and resumes are the operator API's (package ops) and the command's
// ('mensageria routes pause|resume'); a running relay reads them three
// times a lease, and a starting one before its first claim.
type OperatorPause struct {
	Type string
	// By names the operator and Reason says why, as they gave them.
	By, Reason string
	// Since is when the type was first paused, on the database clock.
	Since time.Time
}

// pausesReader reads the operators' pauses (the driver's
// driver.RoutePauser).
type pausesReader interface {
	RoutePauses(ctx context.Context, app string) ([]driver.RoutePause, error)
}

// readPauses reads the app's operator pauses once and applies them to the
// routes: a paused type stops being claimed, a resumed one is claimed
// again at once; each change is logged once, with who and why.
func (m *maintenance) readPauses(ctx context.Context) error {
	if m.pauses == nil {
		return nil
	}
	list, err := m.pauses.RoutePauses(ctx, m.cfg.App)
	if err != nil {
		return fmt.Errorf("reading the operators' route pauses: %w", err)
	}
	paused := map[string]driver.RoutePause{}
	for _, p := range list {
		paused[p.Type] = p
	}
	resumed := false
	for _, rt := range m.rts {
		rt.mu.Lock()
		for _, typ := range rt.types {
			p, now := paused[typ]
			was, before := rt.operatorPaused[typ]
			switch {
			case now && (!before || was != p):
				if !before {
					m.cfg.Logger.Warn("an operator paused a type this app routes: its relay claims none of its messages, which stay pending, until an operator resumes it ('mensageria routes resume')",
						"app", m.cfg.App, "type", typ, "route", rt.name, "paused_by", p.PausedBy, "reason", p.Reason, "since", p.PausedAt)
				}
				if rt.operatorPaused == nil {
					rt.operatorPaused = map[string]driver.RoutePause{}
				}
				rt.operatorPaused[typ] = p
			case !now && before:
				m.cfg.Logger.Info("an operator resumed a type this app routes: its relay claims it again",
					"app", m.cfg.App, "type", typ, "route", rt.name, "was_paused_by", was.PausedBy, "was_paused_since", was.PausedAt)
				delete(rt.operatorPaused, typ)
				resumed = true
			}
		}
		rt.mu.Unlock()
	}
	if resumed {
		m.waker.wakeAll()
	}
	return nil
}

// operatorPausesLocked lists the route's types an operator paused, by
// type; rt.mu is held.
func (rt *route) operatorPausesLocked() []OperatorPause {
	var out []OperatorPause
	for _, typ := range rt.types {
		if p, ok := rt.operatorPaused[typ]; ok {
			out = append(out, OperatorPause{Type: typ, By: p.PausedBy, Reason: p.Reason, Since: p.PausedAt})
		}
	}
	slices.SortFunc(out, func(a, b OperatorPause) int {
		switch {
		case a.Type < b.Type:
			return -1
		case a.Type > b.Type:
			return 1
		}
		return 0
	})
	return out
}
