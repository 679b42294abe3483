package mensageria

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testsignal"
	"github.com/xadm/mensageria/redact"
)

// settleDriver is what settling needs of the driver.
type settleDriver interface {
	Settle(ctx context.Context, p driver.SettleParams) (driver.SettleResult, error)
}

// settler is the relay's completer: it records each delivered batch's
// outcomes, retrying the database while the batch's lease lasts, reports
// them to the hooks, and keeps the settle health Ready serves.
type settler struct {
	cfg          *Config
	drv          settleDriver
	runCtx       context.Context
	routes       map[string]string // type -> its route's name
	routeOf      map[string]*route // type -> its route
	onDelivery   []OnDelivery
	attemptHooks bool          // some OnAttempt hook waits for its end
	doubted      chan struct{} // a message was left in doubt: probe soon
	// headsMoved wakes claiming once the head of an ordered key settled:
	// the key's next message became claimable, and no notification says so.
	headsMoved waker
	health     settleHealth
	failures   *failureHealth // the relay's, which logs and counts the streaks

	settledSignal testsignal.Signal[error]
}

func (s *settler) settle(b *claimed, ds []*Delivery, outs []outcome) {
	p := s.params(b, ds, outs)
	res, err := s.settleWithRetry(b, p)
	if len(p.InDoubt) > 0 {
		signal(s.doubted)
	}
	var kinds map[int64]Outcome
	if err == nil {
		kinds = s.recorded(b, outs, res)
		if s.headsMoved != nil && s.settledOrderedHead(b, outs, kinds) {
			s.headsMoved.wakeAll()
		}
	}
	if len(s.onDelivery) == 0 && !s.attemptHooks {
		return
	}
	s.report(b, ds, outs, kinds, err)
}

// settledOrderedHead reports whether b settled a row of an ordered type as
// delivered or dead: the row was its key's head, so the key's next one,
// which every claim skipped meanwhile, is due now. A retry keeps the head
// in place, and its backoff is what the claim loops wait for (NextDue).
func (s *settler) settledOrderedHead(b *claimed, outs []outcome, kinds map[int64]Outcome) bool {
	for i := range b.jobs {
		j := &b.jobs[i]
		rt := s.routeOf[j.Type]
		if rt == nil || !slices.Contains(rt.ordered, j.Type) {
			continue
		}
		if k, ok := kinds[j.ID]; !ok || k != "" {
			continue // not recorded as settled
		}
		if outs[i].kind == OutcomeDelivered || outs[i].kind == OutcomeDead {
			return true
		}
	}
	return false
}

// params is the settle of b's outcomes, logging the rows parked as dead
// or left in doubt.
func (s *settler) params(b *claimed, ds []*Delivery, outs []outcome) driver.SettleParams {
	p := driver.SettleParams{Token: b.token, KeepDelivered: s.cfg.DeliveredRetention > 0}
	for i, o := range outs {
		id := b.jobs[i].ID
		route := s.routes[ds[i].Type]
		switch o.kind {
		case OutcomeDelivered:
			p.Delivered = append(p.Delivered, id)
		case OutcomeRetry:
			p.Retry = append(p.Retry, driver.Retry{ID: id, Delay: o.delay, Error: errText(o.err), Route: route})
		case OutcomePostponed:
			p.Retry = append(p.Retry, driver.Retry{ID: id, Delay: o.delay, Error: errText(o.err), Route: route, Uncounted: true})
		case OutcomeDead:
			p.Dead = append(p.Dead, driver.Failure{ID: id, Error: errText(o.err), Route: route})
			s.cfg.Logger.Warn("message parked as dead", "type", ds[i].Type, "key", ds[i].Key, "id", ds[i].ID, "attempt", ds[i].Attempt, "err", o.err)
		case OutcomeInDoubt:
			// Probed no sooner than a lease from now: a request on its way
			// has arrived by then.
			p.InDoubt = append(p.InDoubt, driver.Doubt{ID: id, Error: errText(o.err), Route: route, ProbeAfter: s.cfg.Lease})
			s.cfg.Logger.Warn("message in doubt: the request may have reached its receiver, which is not idempotent, so it is not sent again; a reconcile probe, or an operator ('mensageria doubt'), decides",
				"type", ds[i].Type, "key", ds[i].Key, "id", ds[i].ID, "attempt", ds[i].Attempt, "err", o.err)
		default:
			p.Release = append(p.Release, id)
		}
	}
	return p
}

// recorded is what the driver says became of each row of b ("": as
// settled), logging the rows it did not record.
func (s *settler) recorded(b *claimed, outs []outcome, res driver.SettleResult) map[int64]Outcome {
	kinds := map[int64]Outcome{}
	for _, id := range res.Fenced {
		kinds[id] = OutcomeFenced
	}
	for _, id := range res.Expired {
		kinds[id] = OutcomeExpired
	}
	for _, id := range res.Settled {
		kinds[id] = ""
	}
	if n := len(res.Fenced); n > 0 {
		s.cfg.Logger.Warn(fmt.Sprintf("another relay owns %d rows of this batch now; their outcome was not recorded", n), "app", s.cfg.App, "rows", n)
	}
	n := len(res.Expired)
	if n == 0 {
		return kinds
	}
	// An at-most-once row that was sent keeps its mark: in doubt.
	once := 0
	for i := range b.jobs {
		rt := s.routeOf[b.jobs[i].Type]
		if rt != nil && rt.mode == AtMostOnce && outs[i].kind != "" && !outs[i].unsent && slices.Contains(res.Expired, b.jobs[i].ID) {
			once++
		}
	}
	if n > once {
		s.cfg.Logger.Warn(fmt.Sprintf("lease expired before settle; %d rows will be delivered again", n-once), "app", s.cfg.App, "rows", n-once, "lease", s.cfg.Lease)
	}
	if once > 0 {
		s.cfg.Logger.Warn(fmt.Sprintf("lease expired before settle; %d rows of at-most-once routes are in doubt, not sent again (see 'mensageria doubt list')", once), "app", s.cfg.App, "rows", once, "lease", s.cfg.Lease)
		signal(s.doubted)
	}
	return kinds
}

// report ends each attempt of b with its event and calls the OnDelivery
// hooks: the outcome as recorded (kinds), or unsettled when the settle
// failed (settleErr) or the driver did not say.
func (s *settler) report(b *claimed, ds []*Delivery, outs []outcome, kinds map[int64]Outcome, settleErr error) {
	now := time.Now()
	for i, o := range outs {
		if o.unsent {
			continue
		}
		if o.kind == "" {
			// Handed back untried: only an attempt that started ends.
			if len(o.ends) > 0 {
				ev := s.event(ds[i], OutcomeReleased, o, now)
				for _, end := range o.ends {
					end(ev)
				}
			}
			continue
		}
		kind, evErr := o.kind, o.err
		if settleErr != nil {
			kind, evErr = OutcomeUnsettled, errors.Join(o.err, fmt.Errorf("mensageria: settle failed: %w", settleErr))
		} else if k, ok := kinds[b.jobs[i].ID]; !ok {
			// The driver did not say what became of the row: its outcome
			// cannot be claimed as recorded.
			kind = OutcomeUnsettled
		} else if k != "" {
			kind = k
		}
		o.err = evErr
		ev := s.event(ds[i], kind, o, now)
		for _, end := range o.ends {
			end(ev)
		}
		for _, h := range s.onDelivery {
			h.OnDelivery(ev)
		}
	}
}

// event is the DeliveryEvent of one finished attempt.
func (s *settler) event(d *Delivery, kind Outcome, o outcome, now time.Time) DeliveryEvent {
	actx := o.actx
	if actx == nil {
		actx = context.Background()
	}
	return DeliveryEvent{Type: d.Type, Outcome: kind, Attempt: d.Attempt, Latency: now.Sub(d.CreatedAt), Duration: o.elapsed, Err: o.err,
		Key: d.Key, Route: s.routes[d.Type], Context: actx}
}

// settleTimeout bounds one settle statement.
const settleTimeout = 10 * time.Second

// settleWithRetry settles p, and when the database refuses (an error, not
// a fence) tries again with backoff for as long as the batch's lease
// lasts: the outcomes are known, and every row still settled in time is a
// row not delivered again. It runs even while stopping, since the next
// relay would otherwise redo the batch; only Stop's deadline cuts it.
func (s *settler) settleWithRetry(b *claimed, p driver.SettleParams) (driver.SettleResult, error) {
	delay := max(min(100*time.Millisecond, s.cfg.Lease/10), time.Millisecond)
	ceiling := max(s.cfg.Lease/4, delay)
	for {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.runCtx), settleTimeout)
		res, err := s.drv.Settle(ctx, p)
		cancel()
		if err == nil {
			s.health.succeeded()
			s.failures.succeeded(FailureSettle)
			s.settledSignal.Signal(nil)
			return res, nil
		}
		s.health.failed(err)
		s.failures.failed(FailureSettle, err)
		if time.Now().Add(delay).After(b.leaseEnd) || s.runCtx.Err() != nil {
			s.settledSignal.Signal(err)
			return res, err
		}
		sleep(s.runCtx, delay)
		delay = min(delay*2, ceiling)
	}
}

// settleHealth follows streaks of settles failing on database errors, for
// the claim loop, which probes one row at a time while one lasts (the
// relay's failureHealth logs them and makes Ready fail).
type settleHealth struct {
	mu     sync.Mutex
	since  time.Time // the streak's first failure; zero while settles succeed
	err    error     // the latest failure
	probes int       // probe claims made during the streak
}

func (h *settleHealth) failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		h.since = time.Now()
	}
	h.err = err
}

func (h *settleHealth) succeeded() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.since, h.err, h.probes = time.Time{}, nil, 0
}

// failing returns the streak's start and latest error; a nil error while
// settles succeed.
func (h *settleHealth) failing() (time.Time, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.since, h.err
}

// probe reports whether a streak is under way and, if so, counts one more
// probe and returns how many came before it.
func (h *settleHealth) probe() (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		return 0, false
	}
	h.probes++
	return h.probes - 1, true
}

const (
	maxErrorLen = 2000
	maxRouteLen = 500
)

// errText is what the row keeps of a Sender's error.
func errText(err error) string { return storable(err.Error(), maxErrorLen) }

// storable is s as a row can keep it whatever bytes it holds: PostgreSQL
// text refuses NUL and invalid UTF-8, and one refused value would fail the
// settle of the whole batch. A URL it quotes loses its user-info, query
// string and fragment (redact.Text), whichever Sender wrote it: the rows,
// 'mensageria status' and the console show no secret of a destination.
func storable(s string, limit int) string {
	s = redact.Text(strings.ToValidUTF8(s, "\uFFFD"))
	s = strings.ReplaceAll(s, "\x00", " ")
	if len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
