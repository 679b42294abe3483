package mensageria

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testsignal"
)

// claimDriver is what claiming needs of the driver.
type claimDriver interface {
	Claim(ctx context.Context, p driver.ClaimParams) ([]driver.Job, error)
	Listen(ctx context.Context) (driver.Listener, error)
}

// batchDeliverer sends a claimed batch and settles it before returning.
type batchDeliverer interface {
	deliver(b *claimed)
}

// settleProber is settling's failure streak as claiming sees it: whether
// one is under way, and how many probe claims it has made.
type settleProber interface {
	probe() (int, bool)
}

// tokenSource hands out lease tokens.
type tokenSource interface {
	token() int64
}

// claimer claims the relay's batches and hands them to delivering: the
// main loop for flowing routes without a rate limit, one loop per route
// for its probes and its paced claims, the LISTEN wake-ups of both, and
// the timers for the next row coming due (driver.DueReporter).
type claimer struct {
	cfg         *Config
	drv         claimDriver
	due         driver.DueReporter // nil when the driver cannot say: the loops poll
	runCtx      context.Context
	stopping    <-chan struct{}
	lead        leaderState
	health      settleProber
	deliveries  batchDeliverer
	routeEvents routeObserver
	tokens      tokenSource
	onClaim     []OnClaim
	failures    *failureHealth // logs the streaks of failed claims once, for Ready
	types       []string
	order       []string
	rts         []*route
	wake        chan struct{} // work may be waiting
	slots       chan struct{} // the main loop's batches in flight
	batches     sync.WaitGroup
	// lingerUntil is when the main loop may go idle after an empty claim:
	// a NotifyDebounce after the last wake-up or claim that found rows
	// (claimLoop's goroutine only).
	lingerUntil time.Time

	claimedSignal testsignal.Signal[testsignal.Claim]
}

// claimed is one claim's batch.
type claimed struct {
	token    int64
	deadline time.Time // deliveries end by then
	leaseEnd time.Time // the lease runs out by then (it was stamped later)
	jobs     []driver.Job
	probe    bool // a probing route's claim: sent although not flowing
}

// run claims until stopping, starting LISTEN on bg, and returns once the
// batches it claimed are delivered and settled.
func (c *claimer) run(bg *sync.WaitGroup) {
	if !c.cfg.PollOnly && len(c.types) > 0 {
		bg.Go(c.listen)
	}
	var routeLoops sync.WaitGroup
	for _, rt := range c.rts {
		routeLoops.Go(func() { c.routeLoop(rt) })
	}
	c.claimLoop()
	routeLoops.Wait() // each delivers its own batches before it returns
	c.batches.Wait()
}

func (c *claimer) stopped() bool { return closed(c.stopping) }

func (c *claimer) listen() {
	listenFailing := false
	for c.runCtx.Err() == nil {
		l, err := c.drv.Listen(c.runCtx)
		if errors.Is(err, driver.ErrNotSupported) {
			return
		}
		if err != nil {
			if c.runCtx.Err() == nil && !listenFailing {
				// Once a streak: the claims poll meanwhile, and a
				// database gone shows in their failures.
				c.cfg.Logger.Warn("listen failed; polling until it is back", "app", c.cfg.App, "err", err)
			}
			listenFailing = true
			sleep(c.runCtx, c.cfg.PollInterval)
			continue
		}
		if listenFailing {
			c.cfg.Logger.Info("listening again", "app", c.cfg.App)
			listenFailing = false
		}
		if !c.notified(l) {
			return
		}
	}
}

// notified wakes the claimers on each notification of l, until l closes
// (true: listen again) or the relay stops (false).
func (c *claimer) notified(l driver.Listener) bool {
	defer func() { _ = l.Close() }()
	for {
		select {
		case <-c.runCtx.Done():
			return false
		case _, ok := <-l.C():
			if !ok {
				return true
			}
			c.wakeAll()
		}
	}
}

// wakeAll tells every claimer that work may be waiting: the main loop
// and each route's own loop (rate-limited and probing routes claim apart).
func (c *claimer) wakeAll() {
	signal(c.wake)
	for _, rt := range c.rts {
		signal(rt.kick)
	}
}

// busyPoll is the pause between claims while messages keep arriving.
const busyPoll = 2 * time.Millisecond

func (c *claimer) claimLoop() {
	poll := time.NewTimer(c.cfg.PollInterval)
	defer poll.Stop()
	for !c.stopped() && c.next(poll) {
	}
}

// next claims one batch of the main loop and hands it to delivering, or
// waits for work; false once stopping.
func (c *claimer) next(poll *time.Timer) bool {
	types, ordered := c.flowing()
	if len(types) == 0 || !c.lead.isLeader() {
		return c.idle(poll, c.cfg.PollInterval)
	}
	select {
	case c.slots <- struct{}{}:
	case <-c.stopping:
		return false
	}
	// Decided once the slot is ours: waiting for it is waiting for a
	// batch's settle, which may just have started failing.
	limit := c.cfg.BatchSize
	if n, failing := c.health.probe(); failing {
		// Settles keep failing: whatever is claimed now is delivered
		// and then redelivered after its lease. Claim one row at a
		// time, backing off, to find out when settles work again
		// without sending the backlog out once per lease meanwhile.
		if !c.pause(c.probeDelay(n), false) {
			<-c.slots
			return false
		}
		limit = 1
	}
	b, err := c.claim(types, ordered, limit)
	if err != nil {
		<-c.slots
		return c.idle(poll, c.cfg.PollInterval)
	}
	if len(b.jobs) == 0 {
		<-c.slots
		if time.Now().Before(c.lingerUntil) {
			// Enqueues within a NotifyDebounce of the last notification
			// carry none (and an in-process wake-up may come before its
			// commit): look again until the debounce has run out, so
			// that such a message waits busyPoll, not the next
			// notification or the poll.
			return c.pause(busyPoll, true)
		}
		return c.idle(poll, c.untilDue(types, c.cfg.PollInterval))
	}
	c.lingerUntil = time.Now().Add(c.cfg.NotifyDebounce)
	c.batches.Go(func() {
		defer func() { <-c.slots }()
		c.deliveries.deliver(b)
	})
	if len(b.jobs) < limit {
		// The queue was drained at claim time, but messages are
		// flowing: look again after a short pause rather than wait
		// for a (debounced) notification, so a steady stream is
		// picked up within busyPoll. An empty claim then falls back
		// to notifications and the poll.
		return c.pause(busyPoll, true)
	}
	return true
}

// idle waits for a wake-up, a change of leadership or the next poll, d
// from now; false when stopping. The main loop's only.
func (c *claimer) idle(poll *time.Timer, d time.Duration) bool {
	if !poll.Stop() {
		select {
		case <-poll.C:
		default:
		}
	}
	poll.Reset(d)
	select {
	case <-c.stopping:
		return false
	case <-c.wake:
		c.lingerUntil = time.Now().Add(c.cfg.NotifyDebounce)
	case <-c.lead.changes():
	case <-poll.C:
	}
	return true
}

// pause waits d, cut short by a wake-up when wakeable; false when
// stopping. The main loop's only, like idle: both set lingerUntil.
func (c *claimer) pause(d time.Duration, wakeable bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	wake := c.wake
	if !wakeable {
		wake = nil
	}
	select {
	case <-c.stopping:
		return false
	case <-wake:
		c.lingerUntil = time.Now().Add(c.cfg.NotifyDebounce)
	case <-t.C:
	}
	return true
}

// routeLoop runs one route's own claims: its probes while it recovers
// from an outage, and all of its claims when it has a rate limit. Its
// batches are delivered and settled on this loop, one at a time, outside
// the main loop's slots, so neither a paced route nor a probe ever holds
// a slot another route could use.
func (c *claimer) routeLoop(rt *route) {
	idle := c.cfg.PollInterval
	empty := 10 * time.Millisecond // a probe's next look when nothing was due
	forever := time.Duration(1<<63 - 1)
	for !c.stopped() {
		st, until := rt.state()
		types, ordered := rt.claimable()
		now := time.Now()
		limit := 0
		switch {
		case st == RoutePaused && now.Before(until):
			if !c.routeWait(rt, until.Sub(now)) {
				return
			}
			continue
		case st == RoutePaused:
			ch, h := rt.do(func(b *breaker) *change { return b.probe(time.Now()) })
			c.routeEvents.routeChanged(rt, ch, h)
			continue
		case len(types) == 0 || !c.lead.isLeader():
			if !c.routeWait(rt, idle) {
				return
			}
			continue
		case st == RouteProbing:
			limit = 1
		case rt.pace != nil:
			if d := rt.pace.wait(now); d > 0 {
				if !c.routeWait(rt, d) {
					return
				}
				continue
			}
			limit = rt.pace.claimSize(c.cfg.BatchSize)
		default:
			// Flowing without a limit: the main loop claims it.
			if !c.routeWait(rt, forever) {
				return
			}
			continue
		}
		b, err := c.claim(types, ordered, limit)
		if err != nil || len(b.jobs) == 0 {
			d := idle
			switch {
			case st == RouteProbing && err == nil:
				// Rows wait for the probe's time, stamped a moment after
				// it by the database: look again soon.
				d, empty = empty, min(empty*2, idle)
			case err == nil:
				d = c.untilDue(types, idle)
			}
			if !c.routeWait(rt, d) {
				return
			}
			continue
		}
		empty = 10 * time.Millisecond
		b.probe = st == RouteProbing
		c.deliveries.deliver(b)
	}
}

// routeWait sleeps up to d, cut short by a change of the route or a
// wake-up (the caller then looks at the route again); false when stopping.
func (c *claimer) routeWait(rt *route, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.stopping:
		return false
	case <-t.C:
	case <-rt.kick:
	}
	return true
}

// untilDue is how long a loop whose claim of types found nothing may wait:
// d (its poll), or less when the driver reports a row of types coming due
// sooner (a scheduled message, a retry's backoff), which is then claimed
// as it becomes due rather than up to a poll later. A driver that cannot
// say, or fails to, leaves d: the poll still finds every row.
func (c *claimer) untilDue(types []string, d time.Duration) time.Duration {
	if c.due == nil {
		return d
	}
	ctx, cancel := context.WithTimeout(c.runCtx, c.cfg.Lease/2)
	wait, ok, err := c.due.NextDue(ctx, types)
	cancel()
	if err != nil || !ok {
		return d
	}
	// The database measured the wait from its now, before its answer came
	// back, so the timer ends at or after the row's due time; the
	// millisecond added covers a clock of that resolution (SQLite's).
	return min(d, wait+time.Millisecond)
}

// probeDelay is the pause before the n-th probe claim of a settle failure
// streak (n from 0): doubling from BackoffBase up to the lease (or
// BackoffMax when shorter), so recovery is noticed within about a lease.
func (c *claimer) probeDelay(n int) time.Duration {
	d := max(c.cfg.BackoffBase, 10*time.Millisecond)
	ceiling := max(min(c.cfg.BackoffMax, c.cfg.Lease), d)
	for i := 0; i < n && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// flowing lists the types the main claim loop takes: those of flowing
// routes without a rate limit. A paused or probing route is left out, so
// its destination's trouble never holds up the others; a rate-limited
// route claims on its own loop, at its pace.
func (c *claimer) flowing() (types, ordered []string) {
	for _, rt := range c.rts {
		if rt.pace != nil {
			continue
		}
		if st, _ := rt.state(); st != RouteFlowing {
			continue
		}
		t, o := rt.claimable()
		types = append(types, t...)
		ordered = append(ordered, o...)
	}
	if len(types) == len(c.types) {
		return c.types, c.order
	}
	return types, ordered
}

func (c *claimer) claim(types, ordered []string, limit int) (*claimed, error) {
	p := driver.ClaimParams{
		Types:        types,
		OrderedTypes: ordered,
		Limit:        limit,
		Lease:        c.cfg.Lease,
		Token:        c.tokens.token(),
		Fence:        c.lead.fence(),
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(c.runCtx, c.cfg.Lease/2)
	jobs, err := c.drv.Claim(ctx, p)
	cancel()
	for _, h := range c.onClaim {
		h.OnClaim(ClaimEvent{Claimed: len(jobs), Duration: time.Since(start), Err: err})
	}
	if err != nil && c.runCtx.Err() == nil {
		// Counted and logged once a streak (failureHealth), not once an
		// attempt: the main loop and each route's loop retry every poll.
		c.failures.failed(FailureClaim, err)
	} else if err == nil {
		c.failures.succeeded(FailureClaim)
	}
	c.claimedSignal.Signal(testsignal.Claim{Rows: len(jobs), Err: err})
	if err != nil {
		return nil, err
	}
	return leased(p.Token, start, c.cfg.Lease, jobs), nil
}

// leased is the batch of jobs claimed at start under token for lease.
func leased(token int64, start time.Time, lease time.Duration, jobs []driver.Job) *claimed {
	// Deliveries must finish inside the lease, with a margin for the
	// settle, or another relay may already be delivering them again.
	return &claimed{token: token, deadline: start.Add(lease - settleMargin(lease)), leaseEnd: start.Add(lease), jobs: jobs}
}
