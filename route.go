package mensageria

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/xadm/mensageria/driver"
)

// RouteHealth is the state of one route: the types registered with one
// Sender (one destination), as Client.Routes reports it.
type RouteHealth struct {
	// Route names the app and the destination, "pedidos → http
	// https://billing/m2m", as dead letters do.
	Route string
	Types []string
	State RouteState
	// Since is when the route entered State.
	Since time.Time
	// Until is, while paused, when the probe is due; zero otherwise.
	Until time.Time
	// LastError is the latest destination-level failure of the current
	// outage; empty while flowing without failures.
	LastError string
	// Failures counts destination-level failures in a row.
	Failures int
	// RetryAfter: the current pause is one the destination asked for.
	RetryAfter bool
	// MaxRate is the route's rate limit in messages per second (0: none).
	MaxRate float64
	// NotOwned are the route's Types the ownership catalog no longer gives
	// the app (an operator moved them to another app, or released them):
	// the relay does not claim them until the catalog gives them back. A
	// running relay reads the catalog a few times a lease.
	NotOwned []string
	// OperatorPaused are the route's Types an operator paused on purpose,
	// with who and why: the relay does not claim them until an operator
	// resumes them. Apart from State, which is the route's own flow
	// control.
	OperatorPaused []OperatorPause
}

// RouteEvent reports one transition of a route's state.
type RouteEvent struct {
	App  string
	From RouteState
	RouteHealth
}

// OnRouteState is called on every transition of a route's state (paused,
// probing, flowing again), on the relay's goroutines: it must not block.
type OnRouteState interface{ OnRouteState(RouteEvent) }

// Routes reports the state of every route of the running relay, sorted by
// route name; nil when the relay is not running. A paused route does not
// make Ready fail: a sick destination is its route's problem, the relay
// keeps every other route flowing, and the route resumes by itself. The
// active relay also records each transition in the database, where
// 'mensageria status' reads it (driver.Driver.RouteStates).
func (c *Client) Routes() []RouteHealth {
	c.mu.Lock()
	r := c.relay
	c.mu.Unlock()
	if r == nil {
		return nil
	}
	out := make([]RouteHealth, 0, len(r.rts))
	for _, rt := range r.rts {
		out = append(out, rt.health())
	}
	slices.SortFunc(out, func(a, b RouteHealth) int {
		switch {
		case a.Route < b.Route:
			return -1
		case a.Route > b.Route:
			return 1
		}
		return 0
	})
	return out
}

// route is one Sender of the Registry and the types registered with it:
// the unit of flow control. A destination that fails pauses its route,
// never the relay.
type route struct {
	name    string
	types   []string
	ordered []string
	maxRate float64
	pace    *pacer // nil without MaxRate
	// mode is the route's delivery mode; reconciler its probe (AtMostOnce
	// only, nil for none).
	mode       DeliveryMode
	reconciler Reconciler
	kick       chan struct{}

	mu    sync.Mutex
	br    breaker
	dirty bool // changed since last recorded
	// notOwned are the types of the route the catalog does not give the
	// app, each with the app it gives it to ("" none), as maintenance last
	// read it (watchOwnership): they are not claimed.
	notOwned map[string]string
	// operatorPaused are the route's types an operator paused, as
	// maintenance last read them (readPauses): they are not claimed.
	operatorPaused map[string]driver.RoutePause
}

// claimable lists the route's types, and its ordered ones, that the relay
// claims: those the ownership catalog gives the app and no operator
// paused.
func (rt *route) claimable() (types, ordered []string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if len(rt.notOwned) == 0 && len(rt.operatorPaused) == 0 {
		return rt.types, rt.ordered
	}
	held := func(t string) bool {
		_, gone := rt.notOwned[t]
		_, paused := rt.operatorPaused[t]
		return gone || paused
	}
	for _, t := range rt.types {
		if !held(t) {
			types = append(types, t)
		}
	}
	for _, t := range rt.ordered {
		if !held(t) {
			ordered = append(ordered, t)
		}
	}
	return types, ordered
}

func newRoutes(cfg *Config, names map[string]string, now time.Time) ([]*route, map[string]*route) {
	bc := breakerConfig{threshold: cfg.RouteFailureThreshold, pause: cfg.RoutePause, pauseMax: cfg.RoutePauseMax, ceiling: cfg.RetryAfterCeiling}
	var out []*route
	of := map[string]*route{}
	for _, s := range cfg.Registry.senders() {
		rt := &route{name: names[s.types[0]], types: s.types, kick: make(chan struct{}, 1), br: newBreaker(bc, now), dirty: true}
		for _, t := range s.types {
			x, _ := cfg.Registry.Route(t)
			if x.Ordered {
				rt.ordered = append(rt.ordered, t)
			}
			if x.MaxRate > 0 {
				rt.maxRate = x.MaxRate
			}
			rt.mode, rt.reconciler = x.Mode, x.Reconciler
			of[t] = rt
		}
		if rt.maxRate > 0 {
			rt.pace = newPacer(rt.maxRate)
		}
		out = append(out, rt)
	}
	return out, of
}

// routeNames says, per type, who answers a delivery: the app and the
// Sender's destination (DestinationNamer), or the Sender's Go type.
func routeNames(cfg *Config) map[string]string {
	out := map[string]string{}
	for _, s := range cfg.Registry.senders() {
		dest := fmt.Sprintf("%T", s.sender)
		if dn, ok := s.sender.(DestinationNamer); ok {
			if d := dn.Destination(); d != "" {
				dest = d
			}
		}
		name := storable(cfg.App+" → "+dest, maxRouteLen)
		for _, t := range s.types {
			out[t] = name
		}
	}
	return out
}

func (rt *route) health() RouteHealth {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.healthLocked()
}

func (rt *route) healthLocked() RouteHealth {
	b := &rt.br
	h := RouteHealth{Route: rt.name, Types: slices.Clone(rt.types), State: b.state, Since: b.since, Until: b.until,
		LastError: b.lastErr, Failures: b.failures, RetryAfter: b.state == RoutePaused && b.retryReq, MaxRate: rt.maxRate}
	for _, t := range rt.types {
		if _, gone := rt.notOwned[t]; gone {
			h.NotOwned = append(h.NotOwned, t)
		}
	}
	h.OperatorPaused = rt.operatorPausesLocked()
	return h
}

func (rt *route) state() (RouteState, time.Time) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.br.state, rt.br.until
}

// answers is how many answers the destination has given so far.
func (rt *route) answers() uint64 {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.br.answered
}

// do runs one breaker step and reports its transition, if any, with the
// route's health right after it.
func (rt *route) do(step func(b *breaker) *change) (*change, RouteHealth) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	c := step(&rt.br)
	if c == nil {
		return nil, RouteHealth{}
	}
	rt.dirty = true
	return c, rt.healthLocked()
}

// routeObserver is told of every transition of a route.
type routeObserver interface {
	routeChanged(rt *route, c *change, h RouteHealth)
}

// routeEvents reports the transitions of the relay's routes, for claiming
// and delivering, which move them.
type routeEvents struct {
	app    string
	log    *slog.Logger
	hooks  []OnRouteState
	wake   chan struct{} // claiming's main loop
	record chan struct{} // maintenance's record of the routes' states
}

// routeChanged acts on one transition of a route: one log line saying what it
// means and what to do, the hooks, a wake-up for whoever claims next, and
// a record in the database.
func (e *routeEvents) routeChanged(rt *route, c *change, h RouteHealth) {
	if c == nil {
		return
	}
	log := e.log
	args := []any{"app", e.app, "route", h.Route, "types", h.Types}
	switch {
	case c.to == RoutePaused && c.from == RouteFlowing && h.RetryAfter:
		log.Warn("route paused: its destination asked to be left alone until the time it gave (Retry-After); its messages wait without counting attempts, other routes keep flowing, and one probe is sent then; nothing to do unless it lasts (see err)",
			append(args, "until", h.Until, "err", h.LastError)...)
	case c.to == RoutePaused && c.from == RouteFlowing:
		log.Warn(fmt.Sprintf("route paused: its destination failed %d times in a row; its messages wait without counting attempts, other routes keep flowing, and one probe is sent at the time given. What to do: fix the destination, or this route's URL or credentials (see err); the route resumes by itself once a probe gets an answer", h.Failures),
			append(args, "until", h.Until, "err", h.LastError)...)
	case c.to == RoutePaused:
		log.Warn("route probe failed; paused again, longer: its messages keep waiting without counting attempts (see err for what the destination said)",
			append(args, "until", h.Until, "failures", h.Failures, "err", h.LastError)...)
	case c.to == RouteProbing:
		log.Info("route probing: one message at a time is sent to see whether the destination is back", args...)
	case c.to == RouteFlowing:
		log.Info("route resumed: its destination answered a probe; every waiting message is claimed again", args...)
	}
	for _, hk := range e.hooks {
		hk.OnRouteState(RouteEvent{App: e.app, From: c.from, RouteHealth: h})
	}
	signal(rt.kick)
	if c.to == RouteFlowing {
		signal(e.wake)
	}
	signal(e.record)
}
