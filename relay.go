package mensageria

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testsignal"
)

// relay is what Start runs in the background until Stop: five parts, each
// a type of its own with the goroutines it runs, that know one another
// only through the narrow interfaces named below. relay itself (this
// file) builds them, starts them, and stops them in order: claiming first,
// then the batches in flight, then the background loops, then the
// election. Each part's test signals (internal/testsignal, off in
// production, turned on for a Client's next Start by testsignal.ForClient)
// let a test wait for what the part did instead of sleeping.
//
//   - leadership (leadership.go): the app's election and the fencing
//     epoch. Owns the elector (Acquire, Release of the driver's
//     driver.Elector), whether this relay leads, the epoch and the
//     "leadership changed" wake-up. Needs nothing of the others.
//     Offers leaderState: isLeader, fence, changes. Signal: Elected,
//     after every election round.
//   - claiming (claiming.go): the main claim loop, each route's own loop
//     (rate-limited and probing routes), and the LISTEN wake-ups. Owns
//     the batch slots and the wake-up channel. Needs leaderState,
//     settleProber (settling's failure streak, to claim one row at a time
//     meanwhile), batchDeliverer (delivering), routeObserver (route.go)
//     and tokenSource. Offers waker. Signal: Claimed, after every claim.
//   - delivering (delivering.go): sends a claimed batch through its
//     routes' Senders (one at a time or as a BatchSender's batch, within
//     the concurrency bound, the rate and the route's state), marks
//     at-most-once attempts first, and classifies each result into an
//     outcome. Owns the delivery semaphore. Needs batchSettler (settling),
//     routeObserver and attemptMarker (the driver's at-most-once Mark).
//     Offers batchDeliverer. Signal: Delivered, once a batch's sends are
//     done.
//   - settling (settling.go): the completer. Records a batch's outcomes
//     with driver.Settle, retrying database errors while the lease lasts,
//     reports the delivery events and keeps the settle health that Ready
//     serves and claiming probes with. Needs settleDriver (the driver's
//     Settle), the "doubted" wake-up of maintenance and waker (claiming's
//     wake-up, once the head of an ordered key settled). Offers
//     batchSettler, retrySettler and settleProber. Signal: Settled, after
//     every batch's settle.
//   - maintenance (maintenance.go, and reconciling.go for the reconcile
//     probe): the periodic work of the active relay: purging delivered
//     and dead rows, recording route states, probing messages in doubt.
//     It also reads the ownership catalog three times a lease
//     (watchOwnership, ownersReader: the driver's Owners), so that the
//     types claimed follow the catalog while the relay runs.
//     Needs leaderState, maintenanceDriver (Purge, SetRouteStates),
//     doubtClaimer (the driver's ClaimInDoubt), retrySettler (settling's
//     settle with retry), waker (claiming's wake-up, once a probe retries
//     messages) and tokenSource. Signal: Purged, after every purge
//     statement.
//
// The failure health (health.go) is shared by claiming, settling,
// leadership and maintenance: each reports its database steps' failures
// and successes by kind (claim, settle, election, and database when it
// cannot be reached at all), and the health logs each streak once, counts
// each attempt (OnFailure) and gives Ready its reason.
//
// Routes (route.go) are shared by claiming and delivering: a route's
// breaker decides whether its types are claimed, and delivering's results
// move it; routeEvents reports each move (logs, hooks, wake-ups, the
// record maintenance writes). jitter (jitter.go), the relay's one random
// source, gives claiming its lease tokens (tokenSource) and delivering its
// backoff. The parts wake one another and wait through the channel helpers
// of wakeups.go; how a lease divides into delivery and settle is lease.go;
// the test signals' hook is testsignals.go.
type relay struct {
	cfg *Config
	rts []*route // one per distinct Sender

	lead       *leadership
	claims     *claimer
	deliveries *deliverer
	settles    *settler
	upkeep     *maintenance
	failures   *failureHealth // what Ready reports

	runCtx    context.Context // cancelled when Stop's deadline passes
	runCancel context.CancelFunc
	stopping  chan struct{} // closed by Stop: claim no more
	done      chan struct{} // closed when run returns
	stopOnce  sync.Once
}

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
	// A schema behind this build is refused before anything is claimed:
	// the relay's statements may name what a later migration adds, and a
	// relay that delivers but cannot settle redelivers every lease.
	if _, err := c.Migrate(ctx, driver.MigrateCheck); err != nil {
		return fmt.Errorf("mensageria: app %q: the schema does not match this build: %w", c.cfg.App, err)
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
	return r != nil && r.lead.isLeader()
}

func newRelay(ctx context.Context, c *Client) (*relay, error) {
	cfg := &c.cfg
	r := &relay{cfg: cfg, stopping: make(chan struct{}), done: make(chan struct{})}
	r.runCtx, r.runCancel = context.WithCancel(context.WithoutCancel(ctx))
	names := routeNames(cfg)
	rts, routeOf := newRoutes(cfg, names, time.Now())
	r.rts = rts
	amo, err := atMostOnceOf(c.drv, r.rts)
	if err != nil {
		return nil, err
	}
	var el elector
	if cfg.Election == ElectionLeader {
		if el, err = c.drv.Elector(cfg.App, cfg.Lease); err != nil {
			return nil, fmt.Errorf("mensageria: election: %w", err)
		}
	}
	hooks := relayHooks(cfg)
	c.mu.Lock()
	signals := c.signals
	c.mu.Unlock()
	if signals == nil {
		signals = &testsignal.Relay{} // every signal off
	}
	jit := newJitter()
	wake, record, doubted := make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	events := &routeEvents{app: cfg.App, log: cfg.Logger, hooks: hooks.route, wake: wake, record: record}

	r.failures = &failureHealth{app: cfg.App, log: cfg.Logger, hooks: hooks.failure}
	r.lead = newLeadership(cfg, el, hooks.election)
	r.lead.electedSignal = signals.Elected
	r.lead.failures = r.failures
	r.settles = &settler{cfg: cfg, drv: c.drv, runCtx: r.runCtx, routes: names, routeOf: routeOf,
		onDelivery: hooks.delivery, attemptHooks: len(hooks.attempt) > 0, doubted: doubted, failures: r.failures, settledSignal: signals.Settled}
	r.deliveries = &deliverer{cfg: cfg, runCtx: r.runCtx, routeOf: routeOf, amo: amo, settles: r.settles, routeEvents: events,
		jitter: jit, onAttempt: hooks.attempt, sem: make(chan struct{}, cfg.Concurrency), deliveredSignal: signals.Delivered}
	due, _ := c.drv.(driver.DueReporter)
	r.claims = &claimer{cfg: cfg, drv: c.drv, due: due, runCtx: r.runCtx, stopping: r.stopping, lead: r.lead, health: &r.settles.health,
		deliveries: r.deliveries, routeEvents: events, tokens: jit, onClaim: hooks.claim, failures: r.failures,
		types: cfg.Registry.Types(), order: cfg.Registry.orderedTypes(), rts: r.rts,
		wake: wake, slots: make(chan struct{}, cfg.BatchesInFlight), claimedSignal: signals.Claimed}
	r.settles.headsMoved = r.claims
	r.upkeep = &maintenance{cfg: cfg, drv: c.drv, amo: amo, runCtx: r.runCtx, stopping: r.stopping, lead: r.lead,
		settles: r.settles, waker: r.claims, tokens: jit, types: r.claims.types, rts: r.rts, failures: r.failures,
		record: record, doubted: doubted, owners: c.drv, purgedSignal: signals.Purged}
	if p, ok := c.drv.(driver.RoutePauser); ok {
		r.upkeep.pauses = p
		// Before the first claim: a paused type stays unclaimed across
		// restarts and leader changes.
		if err := r.upkeep.readPauses(ctx); err != nil {
			return nil, fmt.Errorf("mensageria: app %q: %w", cfg.App, err)
		}
	}
	return r, nil
}

func (r *relay) run() {
	defer close(r.done)
	var bg sync.WaitGroup
	bg.Go(func() { r.lead.run(r.runCtx) })
	r.upkeep.run(&bg)
	r.claims.run(&bg) // returns once stopping, its batches delivered
	r.runCancel()     // ends the background loops
	bg.Wait()
	r.lead.release()
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

func (r *relay) stopped() bool { return closed(r.stopping) }
