package mensageria

import (
	"context"
	"errors"
	"fmt"

	"github.com/xadm/mensageria/driver"
)

// DeliveryMode is what a route promises its receiver.
type DeliveryMode int

const (
	// AtLeastOnce (the default) redelivers until the destination confirms:
	// for receivers that are idempotent (an Inbox, the Idempotency-Key).
	AtLeastOnce DeliveryMode = iota
	// AtMostOnce is for a receiver that cannot be made idempotent (every
	// request applies its effect again): the relay makes at most one
	// attempt that may have reached the receiver. Before sending, it
	// records the attempt in the outbox's database (committed
	// synchronously, one statement per claim, under the claim's lease).
	// A definite outcome settles as usual; a failure that proves the
	// request never reached the receiver (NotSent) is retried as usual;
	// anything else (a timeout, a connection cut after the request was
	// written, an answer that does not say, the relay dying after the
	// mark) leaves the message in doubt: never sent again automatically,
	// counted in Stats and 'mensageria status', until a Reconciler finds
	// out what happened or an operator resolves it ('mensageria doubt').
	// Exactly once into the receiver, or in doubt and surfaced
	// (docs/guarantees.md, docs/adr/0015-at-most-once-in-doubt.md).
	// Which failures are "not sent" is the Sender's to say: a Sender that
	// marks none (a BatchSender, a broker's) leaves every failure but a
	// refusal in doubt.
	AtMostOnce
)

func (m DeliveryMode) String() string {
	switch m {
	case AtLeastOnce:
		return "at-least-once"
	case AtMostOnce:
		return "at-most-once"
	}
	return fmt.Sprintf("DeliveryMode(%d)", int(m))
}

// Mode sets the route's delivery mode. Types registered with one Sender
// share one route, and so must give it the same mode.
func Mode(m DeliveryMode) RouteOption {
	return func(r *Route) { r.Mode, r.modeSet = m, true }
}

// Reconcile gives an AtMostOnce route the way to ask its receiver whether
// a message's effect exists (m2mhttp.Probe: a GET on a URL made from the
// natural key). The relay runs it for the route's messages in doubt:
// applied settles the message delivered; not applied makes one more
// attempt under the same rules; no answer leaves it in doubt until the
// next try. The probe must tell the receiver's truth: one that says "not
// applied" for an applied effect makes the effect apply twice.
func Reconcile(rc Reconciler) RouteOption {
	return func(r *Route) { r.Reconciler = rc }
}

// Reconciler finds out whether a message's effect exists at the receiver.
// It must be safe for concurrent use.
type Reconciler interface {
	// Reconcile returns Applied or NotApplied when the receiver said so,
	// and an error (with any answer) when it could not tell.
	Reconcile(ctx context.Context, d *Delivery) (Reconciliation, error)
}

// ReconcilerFunc adapts a function to Reconciler.
type ReconcilerFunc func(ctx context.Context, d *Delivery) (Reconciliation, error)

// Reconcile calls f.
func (f ReconcilerFunc) Reconcile(ctx context.Context, d *Delivery) (Reconciliation, error) {
	return f(ctx, d)
}

// Reconciliation is a receiver's answer about one message's effect.
type Reconciliation int

const (
	// Unknown: no answer; the message stays in doubt.
	Unknown Reconciliation = iota
	// Applied: the receiver has the effect.
	Applied
	// NotApplied: the receiver has no trace of it.
	NotApplied
)

func (r Reconciliation) String() string {
	switch r {
	case Applied:
		return "applied"
	case NotApplied:
		return "not applied"
	}
	return "unknown"
}

// notSentError marks a failure that proves the request never reached the
// receiver.
type notSentError struct{ err error }

func (e *notSentError) Error() string { return e.err.Error() }
func (e *notSentError) Unwrap() error { return e.err }
func (e *notSentError) NotSent() bool { return true }

// NotSent wraps a Sender error that proves the request never reached the
// receiver: the connection was refused before anything was written, the
// name did not resolve, the TLS handshake failed, or the destination
// answered with a status its route declares "not applied" (a gateway's
// 503 in front of the receiver). On an AtMostOnce route only such a
// failure is retried; any other leaves the message in doubt. Like pgx's
// SafeToRetry, any error in the chain with a method NotSent() bool that
// returns true counts, so a transport can say it with its own types. It
// composes with Unavailable and RetryAfter. NotSent(nil) is nil.
func NotSent(err error) error {
	if err == nil {
		return nil
	}
	return &notSentError{err: err}
}

// IsNotSent reports whether err proves the request never reached the
// receiver (see NotSent).
func IsNotSent(err error) bool {
	var ns interface{ NotSent() bool }
	return errors.As(err, &ns) && ns.NotSent()
}

// OutcomeInDoubt: the attempt on an AtMostOnce route may have reached the
// receiver and its outcome is unknown; the message is not sent again
// automatically.
const OutcomeInDoubt Outcome = "in_doubt"

// ErrAtMostOnceUnsupported is wrapped by the ConfigError Start returns
// when an AtMostOnce route runs on a driver that cannot mark attempts.
var ErrAtMostOnceUnsupported = errors.New("mensageria: the driver has no at-most-once support (driver.AtMostOnce)")

// atMostOnceOf returns the driver's capability when some route needs it.
func atMostOnceOf(drv driver.Driver, rts []*route) (driver.AtMostOnce, error) {
	need := false
	for _, rt := range rts {
		need = need || rt.mode == AtMostOnce
	}
	if !need {
		return nil, nil
	}
	a, ok := drv.(driver.AtMostOnce)
	if !ok {
		return nil, fmt.Errorf("%w: %w", ErrAtMostOnceUnsupported, &ConfigError{Field: "Mode", Reason: fmt.Sprintf("%T cannot carry an at-most-once route; use a driver of this module (postgres, sqlite) at its current schema", drv)})
	}
	return a, nil
}
