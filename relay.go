package mensageria

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

// busyPoll is the pause between claims while messages keep arriving.
const busyPoll = 2 * time.Millisecond

// stopGrace is how long Stop waits, once its context is done, for cancelled
// deliveries to return and be released.
const stopGrace = 2 * time.Second

// Start records the app's ownership (Register), hands the relay's settings
// to every part of the Registry that asks for them (RelayAware), and then
// launches the relay in the background. It returns once the relay runs;
// the relay runs until Stop. An app with no registered types still runs
// the relay for its purge duties but never claims a row.
//
// A type, inbox consumer or Sender resource another app owns fails Start
// with an *OwnerConflictError naming both apps and the resource, before
// anything runs: a copy-pasted route never drains another app's rows.
func (c *Client) Start(ctx context.Context) error {
	// startMu, not mu, is held while Start talks to the database, so that
	// Ready and IsLeader answer at once meanwhile.
	c.startMu.Lock()
	defer c.startMu.Unlock()
	c.mu.Lock()
	running := c.relay != nil
	c.mu.Unlock()
	if running {
		return ErrAlreadyStarted
	}
	reg, err := c.Register(ctx)
	if err != nil {
		return err
	}
	c.warnUnlisted(reg.Unlisted)
	if err := c.useRelaySettings(reg); err != nil {
		return err
	}
	r, err := newRelay(ctx, c)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.relay = r
	c.stopped = false
	c.mu.Unlock()
	go r.run()
	return nil
}

// settings is what the relay resolved, as RelayAware parts receive it.
func (c *Client) settings(outbox [16]byte) RelaySettings {
	return RelaySettings{
		App:                c.cfg.App,
		OutboxID:           uuid.UUID(outbox),
		Lease:              c.cfg.Lease,
		BackoffBase:        c.cfg.BackoffBase,
		BackoffMax:         c.cfg.BackoffMax,
		MaxAttempts:        c.cfg.MaxAttempts,
		RetryHorizon:       retryHorizon(&c.cfg),
		DeliveredRetention: c.cfg.DeliveredRetention,
	}
}

// useRelaySettings calls UseRelaySettings once on each distinct Sender
// and each Inbox of the Registry that implements RelayAware.
func (c *Client) useRelaySettings(reg driver.RegisterResult) error {
	set := c.settings(reg.OutboxID)
	for _, s := range c.cfg.Registry.senders() {
		if ra, ok := s.sender.(RelayAware); ok {
			if err := ra.UseRelaySettings(set); err != nil {
				return fmt.Errorf("mensageria: app %q: the Sender of type %q (%T) refused the relay's settings: %w", c.cfg.App, s.types[0], s.sender, err)
			}
		}
	}
	for _, in := range c.cfg.Registry.Inboxes() {
		if ra, ok := any(in).(RelayAware); ok {
			if err := ra.UseRelaySettings(set); err != nil {
				return fmt.Errorf("mensageria: app %q: inbox %q refused the relay's settings: %w", c.cfg.App, in.Consumer(), err)
			}
		}
	}
	return nil
}

// warnUnlisted logs, in one line, what the catalog still gives the app
// that its Registry no longer holds: rows of such a type stay pending,
// since no relay claims them, until an operator moves the type.
func (c *Client) warnUnlisted(unlisted []driver.Ownership) {
	if len(unlisted) == 0 {
		return
	}
	var types, other []string
	for _, o := range unlisted {
		if o.Kind == driver.ResourceType {
			types = append(types, o.Name)
		} else {
			other = append(other, string(o.Kind)+" "+o.Name)
		}
	}
	msg := "the catalog gives this app resources its Registry no longer holds; rows of such a type stay pending until an operator releases it ('mensageria owners release type NAME --from APP') or hands it over ('mensageria owners transfer')"
	args := []any{"app", c.cfg.App}
	if len(types) > 0 {
		args = append(args, "types", types)
	}
	if len(other) > 0 {
		args = append(args, "other", other)
	}
	c.cfg.Logger.Warn(msg, args...)
}

// Stop stops claiming at once, lets the batches in flight finish and settle,
// and returns when they did. If ctx ends first, deliveries still running
// are cancelled and their messages released for the next relay, without
// counting the attempt. Stop on a client that was not started returns nil.
func (c *Client) Stop(ctx context.Context) error {
	c.startMu.Lock() // a Start under way finishes first, then is stopped
	c.mu.Lock()
	r := c.relay
	c.relay = nil
	if r != nil {
		c.stopped = true
	}
	c.mu.Unlock()
	c.startMu.Unlock()
	if r == nil {
		return nil
	}
	return r.stop(ctx)
}

// IsLeader reports whether this client's relay currently holds its app's
// election (always true with ElectionNone once started).
func (c *Client) IsLeader() bool {
	c.mu.Lock()
	r := c.relay
	c.mu.Unlock()
	return r != nil && r.leader.Load()
}

type relay struct {
	c       *Client
	cfg     *Config
	types   []string
	order   []string
	hooks   hooks
	routes  map[string]string // type -> "<app> → <destination>"
	health  settleHealth
	rts     []*route          // one per distinct Sender
	routeOf map[string]*route // type -> its route
	record  chan struct{}     // a route changed: record it
	amo     driver.AtMostOnce // nil unless a route is AtMostOnce
	doubted chan struct{}     // a message was left in doubt: probe soon

	runCtx    context.Context // cancelled when Stop's deadline passes
	runCancel context.CancelFunc
	stopping  chan struct{} // closed by Stop: claim no more
	done      chan struct{} // closed when run returns
	stopOnce  sync.Once

	elector driver.Elector
	leader  atomic.Bool
	epoch   atomic.Int64
	changed chan struct{} // leadership changed
	wake    chan struct{} // work may be waiting
	slots   chan struct{} // batches in flight
	sem     chan struct{} // deliveries in flight
	batches sync.WaitGroup

	rngMu sync.Mutex
	rng   *rand.Rand
}

func newRelay(ctx context.Context, c *Client) (*relay, error) {
	cfg := &c.cfg
	r := &relay{
		c:        c,
		cfg:      cfg,
		types:    cfg.Registry.Types(),
		order:    cfg.Registry.orderedTypes(),
		hooks:    relayHooks(cfg),
		routes:   routeNames(cfg),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
		changed:  make(chan struct{}, 1),
		wake:     make(chan struct{}, 1),
		slots:    make(chan struct{}, cfg.BatchesInFlight),
		sem:      make(chan struct{}, cfg.Concurrency),
		rng:      rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	r.rts, r.routeOf = newRoutes(cfg, r.routes, time.Now())
	r.record = make(chan struct{}, 1)
	r.doubted = make(chan struct{}, 1)
	amo, err := r.atMostOnce()
	if err != nil {
		return nil, err
	}
	r.amo = amo
	r.runCtx, r.runCancel = context.WithCancel(context.WithoutCancel(ctx))
	if cfg.Election == ElectionLeader {
		el, err := c.drv.Elector(cfg.App, cfg.Lease)
		if err != nil {
			return nil, fmt.Errorf("mensageria: election: %w", err)
		}
		r.elector = el
	} else {
		r.leader.Store(true)
	}
	return r, nil
}

func (r *relay) run() {
	defer close(r.done)
	var bg sync.WaitGroup
	if r.elector != nil {
		bg.Add(1)
		go func() { defer bg.Done(); r.elect() }()
	}
	if !r.cfg.PollOnly && len(r.types) > 0 {
		bg.Add(1)
		go func() { defer bg.Done(); r.listen() }()
	}
	bg.Add(1)
	go func() { defer bg.Done(); r.purge() }()
	bg.Add(1)
	go func() { defer bg.Done(); r.recordRoutes() }()
	bg.Add(1)
	go func() { defer bg.Done(); r.reconcile() }()
	var routeLoops sync.WaitGroup
	for _, rt := range r.rts {
		routeLoops.Add(1)
		go func() { defer routeLoops.Done(); r.routeLoop(rt) }()
	}

	r.claimLoop()
	routeLoops.Wait() // each delivers its own batches before it returns
	r.batches.Wait()
	r.runCancel() // ends the background loops
	bg.Wait()
	if r.elector != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.elector.Release(ctx); err != nil {
			r.cfg.Logger.Warn("election release failed", "err", err)
		}
		cancel()
	}
}

func (r *relay) stop(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stopping) })
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		r.runCancel() // deliveries see a cancelled context and are released
		select {
		case <-r.done:
		case <-time.After(stopGrace):
			// A Sender that ignores its context keeps its batch; the
			// lease expires and another relay redelivers it.
			r.cfg.Logger.Warn("stop: deliveries still running after cancellation; their leases will expire", "app", r.cfg.App)
		}
		return ctx.Err()
	}
}

func (r *relay) stopped() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// elect keeps calling Acquire at a third of the lease: often enough that a
// live leader never loses its lease and a standby notices a vacancy soon.
func (r *relay) elect() {
	tick := r.cfg.Lease / 3
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-r.runCtx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(r.runCtx, tick)
		epoch, ok, err := r.elector.Acquire(ctx)
		cancel()
		if err != nil && r.runCtx.Err() == nil {
			r.cfg.Logger.Warn("election check failed; acting as standby", "app", r.cfg.App, "err", err)
			ok = false
		}
		if was := r.leader.Load(); was != ok || (ok && epoch != r.epoch.Load()) {
			r.epoch.Store(epoch)
			r.leader.Store(ok)
			r.cfg.Logger.Info("relay leadership changed", "app", r.cfg.App, "leader", ok, "epoch", epoch)
			for _, h := range r.hooks.election {
				h.OnElection(ElectionEvent{App: r.cfg.App, Leader: ok, Epoch: epoch})
			}
			signal(r.changed)
		}
		t.Reset(tick)
	}
}

func (r *relay) listen() {
	for r.runCtx.Err() == nil {
		l, err := r.c.drv.Listen(r.runCtx)
		if errors.Is(err, driver.ErrNotSupported) {
			return
		}
		if err != nil {
			if r.runCtx.Err() == nil {
				r.cfg.Logger.Warn("listen failed; polling until it is back", "err", err)
			}
			sleep(r.runCtx, r.cfg.PollInterval)
			continue
		}
		for {
			select {
			case <-r.runCtx.Done():
				_ = l.Close()
				return
			case _, ok := <-l.C():
				if !ok {
					_ = l.Close()
					goto again
				}
				r.wakeAll()
			}
		}
	again:
	}
}

// wakeAll tells every claimer that work may be waiting: the main loop
// and each route's own loop (rate-limited and probing routes claim apart).
func (r *relay) wakeAll() {
	signal(r.wake)
	for _, rt := range r.rts {
		signal(rt.kick)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (r *relay) claimLoop() {
	poll := time.NewTimer(r.cfg.PollInterval)
	defer poll.Stop()
	wait := func() bool { // false when stopping
		if !poll.Stop() {
			select {
			case <-poll.C:
			default:
			}
		}
		poll.Reset(r.cfg.PollInterval)
		select {
		case <-r.stopping:
			return false
		case <-r.wake:
		case <-r.changed:
		case <-poll.C:
		}
		return true
	}
	pause := func(d time.Duration) bool { // false when stopping
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-r.stopping:
			return false
		case <-r.wake:
		case <-t.C:
		}
		return true
	}
	hold := func(d time.Duration) bool { // false when stopping; wake-ups do not cut it short
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-r.stopping:
			return false
		case <-t.C:
		}
		return true
	}
	for !r.stopped() {
		types, ordered := r.flowing()
		if len(types) == 0 || !r.leader.Load() {
			if !wait() {
				return
			}
			continue
		}
		select {
		case r.slots <- struct{}{}:
		case <-r.stopping:
			return
		}
		// Decided once the slot is ours: waiting for it is waiting for a
		// batch's settle, which may just have started failing.
		limit := r.cfg.BatchSize
		if n, failing := r.health.probe(); failing {
			// Settles keep failing: whatever is claimed now is delivered
			// and then redelivered after its lease. Claim one row at a
			// time, backing off, to find out when settles work again
			// without sending the backlog out once per lease meanwhile.
			if !hold(r.probeDelay(n)) {
				<-r.slots
				return
			}
			limit = 1
		}
		jobs, err := r.claim(types, ordered, limit)
		if err != nil || len(jobs.jobs) == 0 {
			<-r.slots
			if err != nil && !r.stopped() {
				r.cfg.Logger.Warn("claim failed", "app", r.cfg.App, "err", err)
			}
			if !wait() {
				return
			}
			continue
		}
		r.batches.Add(1)
		go func() {
			defer r.batches.Done()
			defer func() { <-r.slots }()
			r.deliver(jobs)
		}()
		if len(jobs.jobs) < limit {
			// The queue was drained at claim time, but messages are
			// flowing: look again after a short pause rather than wait
			// for a (debounced) notification, so a steady stream is
			// picked up within busyPoll. An empty claim then falls back
			// to notifications and the poll.
			if !pause(busyPoll) {
				return
			}
		}
	}
}

// routeLoop runs one route's own claims: its probes while it recovers
// from an outage, and all of its claims when it has a rate limit. Its
// batches are delivered and settled on this loop, one at a time, outside
// the main loop's slots, so neither a paced route nor a probe ever holds
// a slot another route could use.
func (r *relay) routeLoop(rt *route) {
	idle := r.cfg.PollInterval
	empty := 10 * time.Millisecond // a probe's next look when nothing was due
	forever := time.Duration(1<<63 - 1)
	for !r.stopped() {
		st, until := rt.state()
		now := time.Now()
		limit := 0
		switch {
		case st == RoutePaused && now.Before(until):
			if !r.routeWait(rt, until.Sub(now)) {
				return
			}
			continue
		case st == RoutePaused:
			c, h := rt.do(func(b *breaker) *change { return b.probe(time.Now()) })
			r.routeChanged(rt, c, h)
			continue
		case len(rt.types) == 0 || !r.leader.Load():
			if !r.routeWait(rt, idle) {
				return
			}
			continue
		case st == RouteProbing:
			limit = 1
		case rt.pace != nil:
			if d := rt.pace.wait(now); d > 0 {
				if !r.routeWait(rt, d) {
					return
				}
				continue
			}
			limit = rt.pace.claimSize(r.cfg.BatchSize)
		default:
			// Flowing without a limit: the main loop claims it.
			if !r.routeWait(rt, forever) {
				return
			}
			continue
		}
		jobs, err := r.claim(rt.types, rt.ordered, limit)
		if err != nil || len(jobs.jobs) == 0 {
			if err != nil && !r.stopped() {
				r.cfg.Logger.Warn("claim failed", "app", r.cfg.App, "route", rt.name, "err", err)
			}
			d := idle
			if st == RouteProbing && err == nil {
				// Rows wait for the probe's time, stamped a moment after
				// it by the database: look again soon.
				d, empty = empty, min(empty*2, idle)
			}
			if !r.routeWait(rt, d) {
				return
			}
			continue
		}
		empty = 10 * time.Millisecond
		jobs.probe = st == RouteProbing
		r.deliver(jobs)
	}
}

// routeWait sleeps up to d, cut short by a change of the route or a
// wake-up (the caller then looks at the route again); false when stopping.
func (r *relay) routeWait(rt *route, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.stopping:
		return false
	case <-t.C:
	case <-rt.kick:
	}
	return true
}

func (r *relay) token() int64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.Int64()
}

type claimed struct {
	token    int64
	deadline time.Time // deliveries end by then
	leaseEnd time.Time // the lease runs out by then (it was stamped later)
	jobs     []driver.Job
	probe    bool // a probing route's claim: sent although not flowing
}

// probeDelay is the pause before the n-th probe claim of a settle failure
// streak (n from 0): doubling from BackoffBase up to the lease (or
// BackoffMax when shorter), so recovery is noticed within about a lease.
func (r *relay) probeDelay(n int) time.Duration {
	d := max(r.cfg.BackoffBase, 10*time.Millisecond)
	ceiling := max(min(r.cfg.BackoffMax, r.cfg.Lease), d)
	for i := 0; i < n && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// flowing lists the types the main claim loop takes: those of flowing
// routes without a rate limit. A paused or probing route is left out, so
// its destination's trouble never holds up the others; a rate-limited
// route claims on its own loop, at its pace.
func (r *relay) flowing() (types, ordered []string) {
	for _, rt := range r.rts {
		if rt.pace != nil {
			continue
		}
		if st, _ := rt.state(); st != RouteFlowing {
			continue
		}
		types = append(types, rt.types...)
		ordered = append(ordered, rt.ordered...)
	}
	if len(types) == len(r.types) {
		return r.types, r.order
	}
	return types, ordered
}

func (r *relay) claim(types, ordered []string, limit int) (*claimed, error) {
	p := driver.ClaimParams{
		Types:        types,
		OrderedTypes: ordered,
		Limit:        limit,
		Lease:        r.cfg.Lease,
		Token:        r.token(),
	}
	if r.elector != nil {
		p.Fence = &driver.Fence{App: r.cfg.App, Epoch: r.epoch.Load()}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.runCtx, r.cfg.Lease/2)
	jobs, err := r.c.drv.Claim(ctx, p)
	cancel()
	for _, h := range r.hooks.claim {
		h.OnClaim(ClaimEvent{Claimed: len(jobs), Duration: time.Since(start), Err: err})
	}
	if err != nil {
		return nil, err
	}
	// Deliveries must finish inside the lease, with a margin for the
	// settle, or another relay may already be delivering them again.
	return &claimed{token: p.Token, deadline: start.Add(r.cfg.Lease - r.cfg.Lease/10), leaseEnd: start.Add(r.cfg.Lease), jobs: jobs}, nil
}

// outcome of one job inside a batch.
type outcome struct {
	kind    Outcome // "" = release
	err     error
	delay   time.Duration
	elapsed time.Duration
	// unsent: the route was not flowing, so the message was postponed
	// without being sent; no delivery event is reported for it.
	unsent bool
	// actx is the attempt's context as the Sender got it, and ends the
	// OnAttempt hooks' end functions (nil ones left out).
	actx context.Context
	ends []func(DeliveryEvent)
}

// started carries what startAttempt put in from onto o.
func (o outcome) started(from outcome) outcome {
	o.actx, o.ends = from.actx, from.ends
	return o
}

// startAttempt calls the OnAttempt hooks for d, keeping their end
// functions in out, and returns the context Send gets.
func (r *relay) startAttempt(ctx context.Context, out *outcome, rt *route, d *Delivery, batch bool) context.Context {
	out.actx = ctx
	if len(r.hooks.attempt) == 0 {
		return ctx
	}
	if d.Headers == nil {
		d.Headers = map[string]string{}
	}
	a := Attempt{App: r.cfg.App, Route: rt.name, Delivery: d, Batch: batch}
	for _, h := range r.hooks.attempt {
		next, end := h.OnAttempt(out.actx, a)
		if next != nil {
			out.actx = next
		}
		if end != nil {
			out.ends = append(out.ends, end)
		}
	}
	if batch {
		return ctx
	}
	return out.actx
}

func (r *relay) deliver(b *claimed) {
	ctx, cancel := context.WithDeadline(r.runCtx, b.deadline)
	defer cancel()
	outs := make([]outcome, len(b.jobs))
	ds := make([]*Delivery, len(b.jobs))
	for i := range b.jobs {
		ds[i] = toDelivery(&b.jobs[i])
	}
	var wg sync.WaitGroup
	byType := map[string][]int{}
	var typeOrder []string
	// On at-most-once routes only the rows marked may be sent; the others
	// are left as release.
	marked := r.markOnce(b)
	for i := range b.jobs {
		typ := b.jobs[i].Type
		rt, ok := r.cfg.Registry.Route(typ)
		route := r.routeOf[typ]
		if !ok || route == nil {
			// Never claimed on purpose; give it back to its owner untried.
			continue
		}
		if route.mode == AtMostOnce {
			if !marked[i] {
				continue
			}
			ds[i].AtMostOnce = true
		}
		if _, ok := rt.Sender.(BatchSender); ok {
			if byType[typ] == nil {
				typeOrder = append(typeOrder, typ)
			}
			byType[typ] = append(byType[typ], i)
			continue
		}
		if out, held := r.held(route, b.probe); held {
			outs[i] = out
			continue
		}
		if route.pace != nil && !r.paced(ctx, route, 1) {
			continue // left as release: the lease would not wait for the rate
		}
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			continue // left as release
		}
		// Looked at again once a slot is free: the deliveries before this
		// one may have paused the route meanwhile.
		if out, held := r.held(route, b.probe); held {
			<-r.sem
			outs[i] = out
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-r.sem }()
			seen := route.answers()
			actx := r.startAttempt(ctx, &outs[i], route, ds[i], false)
			start := time.Now()
			err := safeSend(actx, rt.Sender, ds[i])
			if route.mode == AtMostOnce {
				outs[i] = r.classifyOnce(ctx, route, seen, ds[i], err).started(outs[i])
			} else {
				outs[i] = r.classify(ctx, route, seen, ds[i], err).started(outs[i])
			}
			outs[i].elapsed = time.Since(start)
		}(i)
	}
	for _, typ := range typeOrder {
		idx := byType[typ]
		rt, _ := r.cfg.Registry.Route(typ)
		route := r.routeOf[typ]
		if route.pace != nil && !r.paced(ctx, route, len(idx)) {
			continue
		}
		select {
		case r.sem <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		if out, held := r.held(route, b.probe); held {
			<-r.sem
			for _, i := range idx {
				outs[i] = out
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-r.sem }()
			batch := make([]*Delivery, len(idx))
			for k, i := range idx {
				batch[k] = ds[i]
				r.startAttempt(ctx, &outs[i], route, ds[i], true)
			}
			seen := route.answers()
			start := time.Now()
			errs := safeSendBatch(ctx, rt.Sender.(BatchSender), batch)
			for k, i := range idx {
				var err error
				if errs != nil {
					err = errs[k]
				}
				if route.mode == AtMostOnce {
					outs[i] = r.classifyOnce(ctx, route, seen, ds[i], err).started(outs[i])
				} else {
					outs[i] = r.classify(ctx, route, seen, ds[i], err).started(outs[i])
				}
				outs[i].elapsed = time.Since(start)
			}
		}()
	}
	wg.Wait()
	r.settle(b, ds, outs)
}

// held reports whether a claimed message must not be sent because its
// route stopped flowing after the claim (a probe batch is the exception
// it was claimed for), and what becomes of it: postponed, uncounted, to
// when the route will want it.
func (r *relay) held(rt *route, probe bool) (outcome, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	st := rt.br.state
	if st == RouteFlowing || (st == RouteProbing && probe) {
		return outcome{}, false
	}
	delay := rt.br.postpone(time.Now(), 0, nil)
	err := fmt.Errorf("not sent: route %s is %s (%s)", rt.name, st, rt.br.lastErr)
	return outcome{kind: OutcomePostponed, err: err, delay: delay, unsent: true}, true
}

// paced waits for the route's rate to allow n more messages; false when
// that would outlast the batch's deadline (or the relay stops).
func (r *relay) paced(ctx context.Context, rt *route, n int) bool {
	_, last := rt.pace.take(time.Now(), n)
	if dl, ok := ctx.Deadline(); ok && last.After(dl) {
		return false
	}
	d := time.Until(last)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func toDelivery(j *driver.Job) *Delivery {
	d := &Delivery{
		ID:        uuid.UUID(j.MessageID),
		Type:      j.Type,
		Key:       j.Key,
		Payload:   j.Payload,
		CreatedAt: j.CreatedAt,
		Attempt:   j.Attempt,
		Seq:       j.ID,
	}
	d.Headers = decodeHeaders(j.Headers)
	return d
}

func safeSend(ctx context.Context, s Sender, d *Delivery) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("sender panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return s.Send(ctx, d)
}

func safeSendBatch(ctx context.Context, s BatchSender, ds []*Delivery) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("sender panicked: %v", p)
			errs = make([]error, len(ds))
			for i := range errs {
				errs[i] = err
			}
		}
	}()
	errs = s.SendBatch(ctx, ds)
	if errs != nil && len(errs) != len(ds) {
		err := fmt.Errorf("mensageria: SendBatch returned %d results for %d deliveries", len(errs), len(ds))
		errs = make([]error, len(ds))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs
}

func (r *relay) classify(ctx context.Context, rt *route, seen uint64, d *Delivery, err error) outcome {
	switch {
	case err == nil:
		c, h := rt.do(func(b *breaker) *change { return b.answer(time.Now()) })
		r.routeChanged(rt, c, h)
		return outcome{kind: OutcomeDelivered}
	case r.runCtx.Err() != nil:
		return outcome{err: err} // stopping: release, do not count
	case IsPermanent(err):
		// The destination answered about the message: it is up.
		c, h := rt.do(func(b *breaker) *change { return b.answer(time.Now()) })
		r.routeChanged(rt, c, h)
		return outcome{kind: OutcomeDead, err: err}
	}
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("delivery ran past the lease: %w", err)
	}
	ra, _ := RetryAfterOf(err)
	if IsUnavailable(err) {
		var delay time.Duration
		counted := false
		c, h := rt.do(func(b *breaker) *change {
			now := time.Now()
			ch := b.fail(now, errText(err), ra)
			// The destination answered others while this one was on its
			// way: it is up, so the failure is the message's own.
			counted = b.answered != seen
			if !counted {
				delay = b.postpone(now, ra, r.backoffOf)
			}
			return ch
		})
		r.routeChanged(rt, c, h)
		if !counted {
			return outcome{kind: OutcomePostponed, err: err, delay: delay}
		}
	}
	if d.Attempt >= r.cfg.MaxAttempts {
		return outcome{kind: OutcomeDead, err: fmt.Errorf("gave up after %d attempts: %w", d.Attempt, err)}
	}
	return outcome{kind: OutcomeRetry, err: err, delay: r.backoffOf(d.Attempt, ra)}
}

// backoffOf is the jittered delay after n failures, at least the
// destination's Retry-After (up to its ceiling).
func (r *relay) backoffOf(n int, retryAfter time.Duration) time.Duration {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return backoff(n, r.cfg.BackoffBase, r.cfg.BackoffMax, retryAfter, r.cfg.RetryAfterCeiling, r.rng)
}

func (r *relay) settle(b *claimed, ds []*Delivery, outs []outcome) {
	p := driver.SettleParams{Token: b.token, KeepDelivered: r.cfg.DeliveredRetention > 0}
	for i, o := range outs {
		id := b.jobs[i].ID
		switch o.kind {
		case OutcomeDelivered:
			p.Delivered = append(p.Delivered, id)
		case OutcomeRetry:
			p.Retry = append(p.Retry, driver.Retry{ID: id, Delay: o.delay, Error: errText(o.err), Route: r.routes[ds[i].Type]})
		case OutcomePostponed:
			p.Retry = append(p.Retry, driver.Retry{ID: id, Delay: o.delay, Error: errText(o.err), Route: r.routes[ds[i].Type], Uncounted: true})
		case OutcomeDead:
			p.Dead = append(p.Dead, driver.Failure{ID: id, Error: errText(o.err), Route: r.routes[ds[i].Type]})
			r.cfg.Logger.Warn("message parked as dead", "type", ds[i].Type, "key", ds[i].Key, "id", ds[i].ID, "attempt", ds[i].Attempt, "err", o.err)
		case OutcomeInDoubt:
			// Probed no sooner than a lease from now: a request on its way
			// has arrived by then.
			p.InDoubt = append(p.InDoubt, driver.Doubt{ID: id, Error: errText(o.err), Route: r.routes[ds[i].Type], ProbeAfter: r.cfg.Lease})
			r.cfg.Logger.Warn("message in doubt: the request may have reached its receiver, which is not idempotent, so it is not sent again; a reconcile probe, or an operator ('mensageria doubt'), decides",
				"type", ds[i].Type, "key", ds[i].Key, "id", ds[i].ID, "attempt", ds[i].Attempt, "err", o.err)
		default:
			p.Release = append(p.Release, id)
		}
	}
	res, err := r.settleWithRetry(b, p)
	if len(p.InDoubt) > 0 {
		signal(r.doubted)
	}
	kinds := map[int64]Outcome{}
	if err == nil {
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
			r.cfg.Logger.Warn(fmt.Sprintf("another relay owns %d rows of this batch now; their outcome was not recorded", n), "app", r.cfg.App, "rows", n)
		}
		if n := len(res.Expired); n > 0 {
			// An at-most-once row that was sent keeps its mark: in doubt.
			once := 0
			for i := range b.jobs {
				rt := r.routeOf[b.jobs[i].Type]
				if rt != nil && rt.mode == AtMostOnce && outs[i].kind != "" && !outs[i].unsent && slices.Contains(res.Expired, b.jobs[i].ID) {
					once++
				}
			}
			if n > once {
				r.cfg.Logger.Warn(fmt.Sprintf("lease expired before settle; %d rows will be delivered again", n-once), "app", r.cfg.App, "rows", n-once, "lease", r.cfg.Lease)
			}
			if once > 0 {
				r.cfg.Logger.Warn(fmt.Sprintf("lease expired before settle; %d rows of at-most-once routes are in doubt, not sent again (see 'mensageria doubt list')", once), "app", r.cfg.App, "rows", once, "lease", r.cfg.Lease)
				signal(r.doubted)
			}
		}
	}
	if len(r.hooks.delivery) == 0 && len(r.hooks.attempt) == 0 {
		return
	}
	now := time.Now()
	for i, o := range outs {
		if o.unsent {
			continue
		}
		if o.kind == "" {
			// Handed back untried: only an attempt that started ends.
			if len(o.ends) > 0 {
				ev := r.event(ds[i], OutcomeReleased, o, now)
				for _, end := range o.ends {
					end(ev)
				}
			}
			continue
		}
		kind, evErr := o.kind, o.err
		if err != nil {
			kind, evErr = OutcomeUnsettled, errors.Join(o.err, fmt.Errorf("mensageria: settle failed: %w", err))
		} else if k, ok := kinds[b.jobs[i].ID]; !ok {
			// The driver did not say what became of the row: its outcome
			// cannot be claimed as recorded.
			kind = OutcomeUnsettled
		} else if k != "" {
			kind = k
		}
		o.err = evErr
		ev := r.event(ds[i], kind, o, now)
		for _, end := range o.ends {
			end(ev)
		}
		for _, h := range r.hooks.delivery {
			h.OnDelivery(ev)
		}
	}
}

// event is the DeliveryEvent of one finished attempt.
func (r *relay) event(d *Delivery, kind Outcome, o outcome, now time.Time) DeliveryEvent {
	actx := o.actx
	if actx == nil {
		actx = context.Background()
	}
	return DeliveryEvent{Type: d.Type, Outcome: kind, Attempt: d.Attempt, Latency: now.Sub(d.CreatedAt), Duration: o.elapsed, Err: o.err,
		Key: d.Key, Route: r.routes[d.Type], Context: actx}
}

// settleTimeout bounds one settle statement.
const settleTimeout = 10 * time.Second

// settleWithRetry settles p, and when the database refuses (an error, not
// a fence) tries again with backoff for as long as the batch's lease
// lasts: the outcomes are known, and every row still settled in time is a
// row not delivered again. It runs even while stopping, since the next
// relay would otherwise redo the batch; only Stop's deadline cuts it.
func (r *relay) settleWithRetry(b *claimed, p driver.SettleParams) (driver.SettleResult, error) {
	delay := max(min(100*time.Millisecond, r.cfg.Lease/10), time.Millisecond)
	ceiling := max(r.cfg.Lease/4, delay)
	for {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.runCtx), settleTimeout)
		res, err := r.c.drv.Settle(ctx, p)
		cancel()
		if err == nil {
			r.health.succeeded(r.cfg.Logger, r.cfg.App)
			return res, nil
		}
		r.health.failed(r.cfg.Logger, r.cfg.App, err)
		if time.Now().Add(delay).After(b.leaseEnd) || r.runCtx.Err() != nil {
			return res, err
		}
		sleep(r.runCtx, delay)
		delay = min(delay*2, ceiling)
	}
}

// settleHealth follows streaks of settles failing on database errors: the
// first failure of a streak and its recovery are logged once each, Ready
// reports the streak, and the claim loop probes one row at a time while
// it lasts.
type settleHealth struct {
	mu     sync.Mutex
	since  time.Time // the streak's first failure; zero while settles succeed
	err    error     // the latest failure
	probes int       // probe claims made during the streak
}

func (h *settleHealth) failed(log *slog.Logger, app string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		h.since = time.Now()
		log.Error("settle failed on a database error; the relay retries each batch's settle while its lease lasts and claims one row at a time until a settle succeeds",
			"app", app, "err", err)
	}
	h.err = err
}

func (h *settleHealth) succeeded(log *slog.Logger, app string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.since.IsZero() {
		return
	}
	log.Info("settles work again", "app", app, "failing_for", time.Since(h.since).Round(time.Millisecond), "last_err", h.err)
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

const (
	maxErrorLen = 2000
	maxRouteLen = 500
)

// errText is what the row keeps of a Sender's error.
func errText(err error) string { return storable(err.Error(), maxErrorLen) }

// storable is s as a row can keep it whatever bytes it holds: PostgreSQL
// text refuses NUL and invalid UTF-8, and one refused value would fail the
// settle of the whole batch.
func storable(s string, limit int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
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

// purge runs on the active relay only, so replicas do not race each other
// over the same rows.
func (r *relay) purge() {
	if r.cfg.PurgeInterval <= 0 {
		return
	}
	for {
		sleep(r.runCtx, r.cfg.PurgeInterval)
		if r.runCtx.Err() != nil {
			return
		}
		if !r.leader.Load() {
			continue
		}
		for r.runCtx.Err() == nil {
			res, err := r.c.drv.Purge(r.runCtx, driver.PurgeParams{
				App:             r.cfg.App,
				Types:           r.types,
				DeliveredBefore: r.cfg.DeliveredRetention,
				Batch:           1000,
			})
			if err != nil {
				if r.runCtx.Err() == nil {
					r.cfg.Logger.Warn("purge failed", "err", err)
				}
				break
			}
			if res.Outbox < 1000 && res.Inbox < 1000 {
				break
			}
		}
	}
}
