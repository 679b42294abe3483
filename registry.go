package mensageria

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Route is a registered type and how its messages travel.
type Route struct {
	Type   string
	Sender Sender
	// Ordered delivers the messages of one key in enqueue order; a failing
	// message blocks only its own key.
	Ordered bool
	// MaxRate bounds the messages per second the relay hands this route's
	// Sender (0: no limit); see MaxRate. Types that share one Sender share
	// one route, and so one limit.
	MaxRate float64
	rateSet bool
	// Mode is AtLeastOnce (the default) or AtMostOnce, for a receiver
	// that is not idempotent; see Mode. Types that share one Sender share
	// one route, and so one mode.
	Mode    DeliveryMode
	modeSet bool
	// Reconciler asks the receiver of an AtMostOnce route whether a
	// message in doubt was applied; nil leaves messages in doubt to an
	// operator. See Reconcile.
	Reconciler Reconciler
}

// RouteOption tunes a route at registration.
type RouteOption func(*Route)

// Ordered makes the route deliver per-key in enqueue order.
func Ordered() RouteOption { return func(r *Route) { r.Ordered = true } }

// MaxRate bounds the route to perSecond messages a second, for a
// destination that cannot take bursts: the relay claims the route's rows
// a tenth of a second's worth at a time and spaces their deliveries at
// least 1/perSecond apart, so no second sees more than perSecond+1 of them
// begin (a BatchSender's request counts every message it carries). Waiting
// for the rate is never a failure: no attempt is counted for it, and no
// message is parked because of it. The rate must be a positive number;
// types registered with one Sender must give it the same rate (or none).
func MaxRate(perSecond float64) RouteOption {
	return func(r *Route) { r.MaxRate, r.rateSet = perSecond, true }
}

// Registry maps message types to their Senders. What it holds is exactly
// what the app may enqueue and what its relay claims.
//
// It also holds the app's Inboxes (RegisterInbox): their consumers are
// recorded as the app's in the ownership catalog at Start, each with its
// window, and only this app's relay purges their records.
type Registry struct {
	mu      sync.RWMutex
	routes  map[string]Route
	inboxes []*Inbox
	gen     atomic.Uint64 // counts changes, so a Client sees what it has not registered yet
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{routes: map[string]Route{}} }

// Register adds the Sender of a type. Registering a type twice or a nil
// Sender is an error.
func (r *Registry) Register(typ string, s Sender, opts ...RouteOption) error {
	if err := validateType(typ); err != nil {
		return err
	}
	if s == nil {
		return &ConfigError{Field: "Registry", Reason: fmt.Sprintf("nil Sender for type %q", typ)}
	}
	rt := Route{Type: typ, Sender: s}
	for _, o := range opts {
		o(&rt)
	}
	if rt.rateSet && !(rt.MaxRate > 0 && rt.MaxRate <= maxRate) {
		return &ConfigError{Field: "MaxRate", Reason: fmt.Sprintf("type %q: %v is not a rate; give a positive number of messages per second (at most %g)", typ, rt.MaxRate, float64(maxRate))}
	}
	if rt.Mode != AtLeastOnce && rt.Mode != AtMostOnce {
		return &ConfigError{Field: "Mode", Reason: fmt.Sprintf("type %q: %v is no delivery mode (use AtLeastOnce or AtMostOnce)", typ, rt.Mode)}
	}
	if rt.Reconciler != nil && rt.Mode != AtMostOnce {
		return &ConfigError{Field: "Reconcile", Reason: fmt.Sprintf("type %q: a reconcile probe is for messages in doubt, which only an AtMostOnce route has; add Mode(AtMostOnce) or drop the probe", typ)}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.routes == nil {
		r.routes = map[string]Route{}
	}
	if _, dup := r.routes[typ]; dup {
		return &ConfigError{Field: "Registry", Reason: fmt.Sprintf("type %q registered twice", typ)}
	}
	for _, other := range r.routes {
		if same(other.Sender, s) && other.MaxRate != rt.MaxRate {
			return &ConfigError{Field: "MaxRate", Reason: fmt.Sprintf("types %q and %q share one Sender, and so one route, but ask for different rates (%g and %g messages per second)", other.Type, typ, other.MaxRate, rt.MaxRate)}
		}
		if same(other.Sender, s) && other.Mode != rt.Mode {
			return &ConfigError{Field: "Mode", Reason: fmt.Sprintf("types %q and %q share one Sender, and so one route, but ask for different delivery modes (%v and %v)", other.Type, typ, other.Mode, rt.Mode)}
		}
		if same(other.Sender, s) && !same(other.Reconciler, rt.Reconciler) {
			return &ConfigError{Field: "Reconcile", Reason: fmt.Sprintf("types %q and %q share one Sender, and so one route, but give it different reconcile probes", other.Type, typ)}
		}
	}
	r.routes[typ] = rt
	r.gen.Add(1)
	return nil
}

// MustRegister is Register that panics, for program set-up.
func (r *Registry) MustRegister(typ string, s Sender, opts ...RouteOption) *Registry {
	if err := r.Register(typ, s, opts...); err != nil {
		panic(err)
	}
	return r
}

// RegisterInbox adds an Inbox of this app. Its consumer becomes the app's
// in the ownership catalog when the Client starts, with the Inbox's window:
// the app's relay then purges its records after that window, and no other
// app's purge touches them. An Inbox that is not registered keeps its
// records until an app registers it. A consumer registered twice is an
// error.
func (r *Registry) RegisterInbox(in *Inbox) error {
	if in == nil {
		return &ConfigError{Field: "Registry", Reason: "nil Inbox"}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, x := range r.inboxes {
		if x.Consumer() == in.Consumer() {
			return &ConfigError{Field: "Registry", Reason: fmt.Sprintf("inbox consumer %q registered twice", in.Consumer())}
		}
	}
	r.inboxes = append(r.inboxes, in)
	r.gen.Add(1)
	return nil
}

// generation counts the changes made to the Registry.
func (r *Registry) generation() uint64 { return r.gen.Load() }

// Inboxes returns the registered Inboxes, in registration order.
func (r *Registry) Inboxes() []*Inbox {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.inboxes)
}

// Types returns the registered types, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.routes))
	for t := range r.routes {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Route returns the route of a type.
func (r *Registry) Route(typ string) (Route, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	rt, ok := r.routes[typ]
	return rt, ok
}

// registeredSender is one distinct Sender of a Registry and the types it
// is registered for.
type registeredSender struct {
	sender Sender
	types  []string
}

// senders returns each distinct Sender once (one registered for several
// types is one value), in the order of their first type.
func (r *Registry) senders() []registeredSender {
	var out []registeredSender
next:
	for _, t := range r.Types() {
		rt, _ := r.Route(t)
		for i := range out {
			if same(out[i].sender, rt.Sender) {
				out[i].types = append(out[i].types, t)
				continue next
			}
		}
		out = append(out, registeredSender{sender: rt.Sender, types: []string{t}})
	}
	return out
}

func (r *Registry) orderedTypes() []string {
	var out []string
	for _, t := range r.Types() {
		if rt, _ := r.Route(t); rt.Ordered {
			out = append(out, t)
		}
	}
	return out
}

const maxTypeLen = 200

// maxRate is the highest MaxRate: beyond it a pace of nanoseconds means
// nothing.
const maxRate = 1e9

func validateType(typ string) error {
	if typ == "" {
		return &ConfigError{Field: "Type", Reason: "empty message type"}
	}
	if len(typ) > maxTypeLen {
		return &ConfigError{Field: "Type", Reason: fmt.Sprintf("message type longer than %d bytes", maxTypeLen)}
	}
	if !utf8.ValidString(typ) || strings.ContainsRune(typ, 0) {
		return &ConfigError{Field: "Type", Reason: "message type must be valid UTF-8 without NUL"}
	}
	return nil
}
