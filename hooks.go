package mensageria

import "time"

// Hook is any value implementing one or more of the On* interfaces below;
// the client calls the ones it implements. Hooks run on the relay's
// goroutines and must not block: hand heavy work (exporters) elsewhere.
type Hook any

// Outcome of one delivery attempt.
type Outcome string

// The outcomes a delivery can have.
const (
	OutcomeDelivered Outcome = "delivered"
	OutcomeRetry     Outcome = "retry"
	OutcomeDead      Outcome = "dead"
	// OutcomeFenced: the attempt finished but another relay owns the row
	// now (it claimed the row again after the lease, or settled it), so
	// this outcome was not recorded.
	OutcomeFenced Outcome = "fenced"
	// OutcomeExpired: the attempt finished after its lease ran out; no
	// other relay had taken the row, but the outcome was not recorded and
	// the row will be delivered again.
	OutcomeExpired Outcome = "expired"
	// OutcomePostponed: the destination failed (an error marked
	// Unavailable) while its route delivered nothing else: the message
	// waits for its route without counting the attempt.
	OutcomePostponed Outcome = "postponed"
	// OutcomeUnsettled: the database refused the settle (an error, not a
	// fence) for as long as the lease lasted; the outcome was not recorded
	// and the row will be delivered again after its lease. The event's Err
	// carries the settle's error (joined to the delivery's, if any).
	OutcomeUnsettled Outcome = "unsettled"
)

// DeliveryEvent describes one finished delivery attempt.
type DeliveryEvent struct {
	Type    string
	Outcome Outcome
	Attempt int
	// Latency runs from the message's creation (database clock) to the end
	// of the attempt, as seen by this process's clock.
	Latency time.Duration
	// Duration is the Sender's own time.
	Duration time.Duration
	Err      error
}

// OnDelivery is called after every delivery attempt is settled.
type OnDelivery interface{ OnDelivery(DeliveryEvent) }

// ClaimEvent describes one claim.
type ClaimEvent struct {
	Claimed  int
	Duration time.Duration
	Err      error
}

// OnClaim is called after every claim.
type OnClaim interface{ OnClaim(ClaimEvent) }

// ElectionEvent reports a change of leadership seen by this process.
type ElectionEvent struct {
	App    string
	Leader bool
	Epoch  int64
}

// OnElection is called when this process gains or loses leadership.
type OnElection interface{ OnElection(ElectionEvent) }

// isHook reports whether h implements at least one hook interface.
func isHook(h Hook) bool {
	switch h.(type) {
	case OnDelivery, OnClaim, OnElection, OnRouteState:
		return true
	}
	return false
}

// same reports whether two values are one: equal comparable values, such as
// one pointer. Values of a type that cannot be compared are never the same
// as anything else.
func same(a, b any) (eq bool) {
	defer func() {
		if recover() != nil {
			eq = false
		}
	}()
	return a == b
}

// relayHooks are the hooks of one run of the relay: Config.Hooks and then
// every Sender of the Registry that implements a hook interface, each value
// once, so a Sender also listed in Config.Hooks is not called twice.
func relayHooks(cfg *Config) hooks {
	var all []Hook
	add := func(h any) {
		if !isHook(h) {
			return
		}
		for _, x := range all {
			if same(x, h) {
				return
			}
		}
		all = append(all, h)
	}
	for _, h := range cfg.Hooks {
		add(h)
	}
	for _, s := range cfg.Registry.senders() {
		add(s.sender)
	}
	return splitHooks(all)
}

type hooks struct {
	delivery []OnDelivery
	claim    []OnClaim
	election []OnElection
	route    []OnRouteState
}

func splitHooks(hs []Hook) hooks {
	var h hooks
	for _, x := range hs {
		if v, ok := x.(OnDelivery); ok {
			h.delivery = append(h.delivery, v)
		}
		if v, ok := x.(OnClaim); ok {
			h.claim = append(h.claim, v)
		}
		if v, ok := x.(OnElection); ok {
			h.election = append(h.election, v)
		}
		if v, ok := x.(OnRouteState); ok {
			h.route = append(h.route, v)
		}
	}
	return h
}
