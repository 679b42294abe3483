package mensageria

import (
	"context"
	"time"
)

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
	// OutcomeReleased: the attempt was cut short by the relay stopping;
	// the row was handed back untried for the next relay. Only an
	// OnAttempt's end function sees it: OnDelivery is not called for it.
	OutcomeReleased Outcome = "released"
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
	// Key and Route name the message's natural key and who answers it
	// (the app and its Sender's destination, as the route states name it).
	Key   string
	Route string
	// Context is the attempt's context as its Sender got it, carrying
	// what the OnAttempt hooks put in it (a span): a metrics hook takes a
	// trace id from it for an exemplar. Never nil.
	Context context.Context
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

// Attempt is a delivery attempt about to be handed to its Sender.
type Attempt struct {
	App   string
	Route string
	// Delivery is this attempt's own copy: a hook may change its Headers
	// (a tracer replaces the traceparent with its attempt span's, so the
	// destination continues the trace from the attempt), and the Sender
	// gets what the hooks left.
	Delivery *Delivery
	// Batch is true when the Sender is a BatchSender: the context the hook
	// returns is not the Send's (one exchange carries many deliveries,
	// under the batch's own context), so only Delivery.Headers reach the
	// destination.
	Batch bool
}

// OnAttempt is called as each delivery attempt begins, on the goroutine
// that sends it, before the Sender gets it. The context it returns is the
// one Send gets (a tracer puts its span in it); end is called once with
// the attempt's DeliveryEvent when its outcome is known, after the settle
// (OutcomeReleased when the relay stopped under it); end may be nil.
// Messages held back unsent (their route paused) start no attempt.
type OnAttempt interface {
	OnAttempt(ctx context.Context, a Attempt) (actx context.Context, end func(DeliveryEvent))
}

// OnEnqueue is called by Enqueue and EnqueueTx for every message once all
// the call's messages are valid, before they are stored, with the
// enqueuing code's context: a tracer stores the caller's trace context in
// m.Headers (traceparent). m is the client's copy, its ID assigned and its
// Headers a map of its own; only what the hook leaves in Headers is kept
// (a header it makes invalid fails the call, storing nothing), and the
// caller's Message is never touched. PrepareEnqueue, which has no context,
// does not call it.
type OnEnqueue interface {
	OnEnqueue(ctx context.Context, m *Message)
}

// isHook reports whether h implements at least one hook interface.
func isHook(h Hook) bool {
	switch h.(type) {
	case OnDelivery, OnClaim, OnElection, OnRouteState, OnAttempt, OnEnqueue, OnFailure:
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
	attempt  []OnAttempt
	enqueue  []OnEnqueue
	failure  []OnFailure
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
		if v, ok := x.(OnAttempt); ok {
			h.attempt = append(h.attempt, v)
		}
		if v, ok := x.(OnEnqueue); ok {
			h.enqueue = append(h.enqueue, v)
		}
		if v, ok := x.(OnFailure); ok {
			h.failure = append(h.failure, v)
		}
	}
	return h
}
