package mensageria

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// markOnce records, before anything is sent, the attempt of the claim's
// rows on at-most-once routes, in one statement, and returns which of
// them may be sent. On an error none may: they are left as release,
// which also takes back a mark that committed unseen.
func (d *deliverer) markOnce(b *claimed, skip map[int]bool) map[int]bool {
	var idx []int
	var ids []int64
	for i := range b.jobs {
		if skip[i] {
			continue
		}
		if rt := d.routeOf[b.jobs[i].Type]; rt != nil && rt.mode == AtMostOnce {
			idx = append(idx, i)
			ids = append(ids, b.jobs[i].ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	ok := map[int]bool{}
	ctx, cancel := context.WithDeadline(d.runCtx, b.deadline)
	marked, err := d.amo.Mark(ctx, driver.MarkParams{Token: b.token, IDs: ids})
	cancel()
	if err != nil {
		if d.runCtx.Err() == nil {
			d.cfg.Logger.Warn("marking at-most-once attempts failed; those messages are not sent now and are given back", "app", d.cfg.App, "rows", len(ids), "err", err)
		}
		return ok
	}
	got := map[int64]bool{}
	for _, id := range marked {
		got[id] = true
	}
	for _, i := range idx {
		if got[b.jobs[i].ID] {
			ok[i] = true
		}
	}
	return ok
}

// classifyOnce is classify for an at-most-once route: only an answer, or
// a failure that proves the request never reached the receiver, is
// definite; anything else leaves the message in doubt.
func (d *deliverer) classifyOnce(ctx context.Context, rt *route, seen uint64, dv *Delivery, err error) outcome {
	switch {
	case err == nil, IsPermanent(err), IsNotSent(err):
		return d.classify(ctx, rt, seen, dv, err)
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("delivery ran past the lease or the relay stopped, after the request may have left: %w", err)
	}
	if IsUnavailable(err) {
		ra, _ := RetryAfterOf(err)
		c, h := rt.do(func(b *breaker) *change { return b.fail(time.Now(), errText(err), ra) })
		d.routeEvents.routeChanged(rt, c, h)
	}
	return outcome{kind: OutcomeInDoubt, err: fmt.Errorf("in doubt: the request may have reached the receiver: %w", err)}
}

// reconcile runs, on the active relay, the probes of the routes that have
// one: every ReconcileInterval, and soon after a message is left in
// doubt, each route's rows in doubt are probed, a batch at a time.
func (m *maintenance) reconcile() {
	var rts []*route
	for _, rt := range m.rts {
		if rt.mode == AtMostOnce && rt.reconciler != nil {
			rts = append(rts, rt)
		}
	}
	if len(rts) == 0 || m.amo == nil {
		return
	}
	t := time.NewTicker(m.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		select {
		case <-m.runCtx.Done():
			return
		case <-t.C:
		case <-m.doubted:
		}
		if !m.lead.isLeader() || closed(m.stopping) {
			continue
		}
		for _, rt := range rts {
			for m.runCtx.Err() == nil && m.probeBatch(rt) == m.cfg.BatchSize {
			}
		}
	}
}

// probeBatch probes one batch of a route's rows in doubt and returns how
// many it claimed.
func (m *maintenance) probeBatch(rt *route) int {
	types, _ := rt.claimable() // a type moved to another app is its to probe
	if len(types) == 0 {
		return 0
	}
	p := driver.InDoubtClaimParams{Types: types, Limit: m.cfg.BatchSize, Lease: m.cfg.Lease, Token: m.tokens.token(), Quiet: m.cfg.Lease, Fence: m.lead.fence()}
	start := time.Now()
	ctx, cancel := context.WithTimeout(m.runCtx, m.cfg.Lease/2)
	jobs, err := m.amo.ClaimInDoubt(ctx, p)
	cancel()
	if err != nil {
		if m.runCtx.Err() == nil {
			m.cfg.Logger.Warn("claiming messages in doubt for their probe failed", "app", m.cfg.App, "route", rt.name, "err", err)
		}
		return 0
	}
	if len(jobs) == 0 {
		return 0
	}
	b := leased(p.Token, start, m.cfg.Lease, jobs)
	dctx, dcancel := context.WithDeadline(m.runCtx, b.deadline)
	defer dcancel()
	sp := driver.SettleParams{Token: b.token, KeepDelivered: m.cfg.DeliveredRetention > 0}
	answers := make([]Reconciliation, len(jobs))
	for i := range jobs {
		d := toDelivery(&jobs[i])
		if why := unreadable(&jobs[i], d); why != "" {
			// No probe can ask about a message it cannot read (its id
			// among it): left in doubt, with the reason, for an operator.
			sp.InDoubt = append(sp.InDoubt, driver.Doubt{ID: jobs[i].ID, Route: rt.name, ProbeAfter: m.cfg.ReconcileInterval,
				Error: storable("in doubt; not probed: unreadable row: "+why+" ('mensageria doubt resolve' decides)", maxErrorLen)})
			continue
		}
		d.AtMostOnce = true
		ans, perr := safeReconcile(dctx, rt.reconciler, d)
		answers[i] = ans
		switch {
		case perr == nil && ans == Applied:
			sp.Delivered = append(sp.Delivered, jobs[i].ID)
		case perr == nil && ans == NotApplied && d.Attempt >= m.cfg.MaxAttempts:
			sp.Dead = append(sp.Dead, driver.Failure{ID: jobs[i].ID, Route: rt.name,
				Error: fmt.Sprintf("the reconcile probe says not applied, and the message had its %d attempts", d.Attempt)})
		case perr == nil && ans == NotApplied:
			sp.Retry = append(sp.Retry, driver.Retry{ID: jobs[i].ID, Route: rt.name,
				Error: "the reconcile probe says not applied: one more attempt"})
		default:
			if perr == nil {
				perr = errors.New("the probe gave no answer")
			}
			sp.InDoubt = append(sp.InDoubt, driver.Doubt{ID: jobs[i].ID, Route: rt.name, ProbeAfter: m.cfg.ReconcileInterval,
				Error: storable("in doubt; reconcile probe: "+perr.Error(), maxErrorLen)})
		}
	}
	res, err := m.settles.settleWithRetry(b, sp)
	if err != nil {
		m.cfg.Logger.Warn("recording the answers of reconcile probes failed; the messages stay in doubt and are probed again", "app", m.cfg.App, "route", rt.name, "err", err)
		return len(jobs)
	}
	if n := len(sp.Delivered) + len(sp.Retry) + len(sp.Dead); n > 0 {
		m.cfg.Logger.Info("reconcile probe resolved messages in doubt", "app", m.cfg.App, "route", rt.name,
			"applied", len(sp.Delivered), "not_applied", len(sp.Retry)+len(sp.Dead), "still_in_doubt", len(sp.InDoubt), "settled", len(res.Settled))
	}
	if len(sp.Retry) > 0 {
		m.waker.wakeAll()
	}
	return len(jobs)
}

func safeReconcile(ctx context.Context, rc Reconciler, d *Delivery) (ans Reconciliation, err error) {
	defer func() {
		if p := recover(); p != nil {
			ans, err = Unknown, fmt.Errorf("reconciler panicked: %v", p)
		}
	}()
	ans, err = rc.Reconcile(ctx, d)
	if err == nil && ans != Applied && ans != NotApplied {
		err = fmt.Errorf("the probe answered %v", ans)
	}
	return ans, err
}
