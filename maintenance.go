package mensageria

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testsignal"
)

// maintenanceDriver is what maintenance needs of the driver.
type maintenanceDriver interface {
	Purge(ctx context.Context, p driver.PurgeParams) (driver.PurgeResult, error)
	SetRouteStates(ctx context.Context, p driver.RouteStatesParams) error
}

// doubtClaimer leases rows in doubt for their reconcile probe (the
// driver's driver.AtMostOnce).
type doubtClaimer interface {
	ClaimInDoubt(ctx context.Context, p driver.InDoubtClaimParams) ([]driver.Job, error)
}

// retrySettler is settling's settle with retry, which a reconcile probe's
// answers go through.
type retrySettler interface {
	settleWithRetry(b *claimed, p driver.SettleParams) (driver.SettleResult, error)
}

// ownersReader reads the ownership catalog (the driver's Owners).
type ownersReader interface {
	Owners(ctx context.Context, app string) ([]driver.Ownership, error)
}

// waker tells claiming that work may be waiting.
type waker interface {
	wakeAll()
}

// purgeBatch is how many rows one purge statement deletes at most; a
// full batch is followed by another at once.
const purgeBatch = 1000

// maintenance is the relay's periodic work, done by the active relay only
// so that replicas do not race each other over the same rows: purging
// delivered and dead rows, recording the routes' states, and probing
// messages in doubt (reconcile, in reconciling.go).
type maintenance struct {
	cfg      *Config
	drv      maintenanceDriver
	amo      doubtClaimer // nil unless a route is AtMostOnce
	runCtx   context.Context
	stopping <-chan struct{}
	lead     leaderState
	settles  retrySettler
	waker    waker
	tokens   tokenSource
	types    []string
	rts      []*route
	record   chan struct{}  // a route changed: record it
	doubted  chan struct{}  // a message was left in doubt: probe soon
	failures *failureHealth // a database found unreachable counts there
	// owners reads the catalog for watchOwnership (nil: not watched);
	// replaceRoutes asks recordRoutes to replace the app's records, once
	// the types it claims changed.
	owners        ownersReader
	replaceRoutes atomic.Bool
	// pauses reads the operators' route pauses with the catalog (nil: the
	// driver records none).
	pauses pausesReader

	purgedSignal testsignal.Signal[driver.PurgeResult]
}

// run starts the periodic loops on bg; they end with the relay's run
// context.
func (m *maintenance) run(bg *sync.WaitGroup) {
	bg.Go(m.purge)
	bg.Go(m.recordRoutes)
	bg.Go(m.reconcile)
	bg.Go(m.watchOwnership)
}

// ownershipEvery is how often a relay reads the ownership catalog: three
// times a lease, so that it notices within one lease (a read that hangs
// is given up after the same time) that an operator moved a type.
func ownershipEvery(lease time.Duration) time.Duration { return lease / 3 }

// watchOwnership keeps the types the relay claims to those the ownership
// catalog gives its app. Start registers every type of the Registry, but an
// operator may move one to another app ('mensageria owners transfer') or
// release it while the relay runs: the relay then stops claiming it, and
// claims it again once the catalog gives it back (a transfer back, or this
// app's next enqueue registering a released type again). Every replica
// reads, standbys included, so a new leader claims the right types at once.
// Rows of the type the relay claimed before it noticed are delivered and
// settled by it, as any claimed batch: once, under their lease and token.
func (m *maintenance) watchOwnership() {
	if m.owners == nil || len(m.rts) == 0 {
		return
	}
	every := ownershipEvery(m.cfg.Lease)
	t := time.NewTicker(every)
	defer t.Stop()
	var failing bool
	for {
		select {
		case <-m.runCtx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(m.runCtx, every)
		err := m.readOwnership(ctx)
		if err == nil {
			err = m.readPauses(ctx)
		}
		cancel()
		switch {
		case err != nil && unreachable(err):
			// The relay's failure health logs a database outage once.
			m.failures.failed(FailureDatabase, err)
		case err != nil && !failing && m.runCtx.Err() == nil:
			m.cfg.Logger.Warn("reading the ownership catalog or the operators' route pauses failed; the relay keeps claiming the types it last read as its own and not paused until a read succeeds", "app", m.cfg.App, "err", err)
			failing = true
		case err == nil && failing:
			m.cfg.Logger.Info("reading the ownership catalog and the route pauses works again", "app", m.cfg.App)
			failing = false
		}
	}
}

// readOwnership reads the catalog once and applies it to the routes: a
// type no longer the app's stops being claimed, one given back is claimed
// again; each change is logged once, with the type's owner.
func (m *maintenance) readOwnership(ctx context.Context) error {
	owned, err := m.owners.Owners(ctx, m.cfg.App)
	if err != nil {
		return err
	}
	mine := map[string]bool{}
	for _, o := range owned {
		if o.Kind == driver.ResourceType && o.App == m.cfg.App {
			mine[o.Name] = true
		}
	}
	var lost, back []string
	for _, rt := range m.rts {
		rt.mu.Lock()
		for _, typ := range rt.types {
			_, gone := rt.notOwned[typ]
			if gone == mine[typ] {
				if gone {
					back = append(back, typ)
				} else {
					lost = append(lost, typ)
				}
			}
		}
		rt.mu.Unlock()
	}
	if len(lost) == 0 && len(back) == 0 {
		return nil
	}
	ownerOf := map[string]string{}
	if len(lost) > 0 {
		// Only to name the new owner: a failure leaves it unnamed.
		if all, err := m.owners.Owners(ctx, ""); err == nil {
			for _, o := range all {
				if o.Kind == driver.ResourceType {
					ownerOf[o.Name] = o.App
				}
			}
		}
	}
	// Logged before the routes show it: whoever sees a route's NotOwned
	// (status, a test) finds the line that says why already written.
	for _, typ := range lost {
		owner := ownerOf[typ]
		if owner == "" {
			owner = "(no app: released)"
		}
		m.cfg.Logger.Warn("the ownership catalog no longer gives this app a type it routes: its relay stops claiming it, and the rows it had already claimed are delivered and settled as usual; the type's messages are now its owner's to deliver (to route it here again: 'mensageria owners transfer')",
			"app", m.cfg.App, "type", typ, "owner", owner)
	}
	for _, typ := range back {
		m.cfg.Logger.Info("the ownership catalog gives this app a type it routes again: its relay claims it", "app", m.cfg.App, "type", typ)
	}
	for _, rt := range m.rts {
		rt.mu.Lock()
		for _, typ := range rt.types {
			switch {
			case slices.Contains(lost, typ):
				if rt.notOwned == nil {
					rt.notOwned = map[string]string{}
				}
				rt.notOwned[typ] = ownerOf[typ]
				rt.dirty = true
			case slices.Contains(back, typ):
				delete(rt.notOwned, typ)
				rt.dirty = true
			}
		}
		rt.mu.Unlock()
	}
	// The record of the routes' states drops the types no longer claimed
	// (their owner's relay records them), and claiming looks at once.
	m.replaceRoutes.Store(true)
	signal(m.record)
	m.waker.wakeAll()
	return nil
}

func (m *maintenance) purge() {
	if m.cfg.PurgeInterval <= 0 {
		return
	}
	for {
		sleep(m.runCtx, m.cfg.PurgeInterval)
		if m.runCtx.Err() != nil {
			return
		}
		if m.lead.isLeader() {
			m.purgeAll()
		}
	}
}

// purgeAll purges a batch at a time until no part of one is full: the
// outbox's delivered rows, the inbox records and the applied inbox queue
// rows each have their own backlog.
func (m *maintenance) purgeAll() {
	for m.runCtx.Err() == nil {
		res, err := m.drv.Purge(m.runCtx, driver.PurgeParams{
			App:             m.cfg.App,
			Types:           m.purgeTypes(),
			DeliveredBefore: m.cfg.DeliveredRetention,
			Batch:           purgeBatch,
		})
		if err != nil {
			if m.runCtx.Err() == nil {
				m.failedQuietly("purge failed", err)
			}
			return
		}
		m.purgedSignal.Signal(res)
		if res.Outbox < purgeBatch && res.Inbox < purgeBatch && res.InboxQueue < purgeBatch {
			return
		}
	}
}

// PurgeInbox deletes, a batch at a time until one is not full, the inbox
// records of the consumers the catalog gives c's app, each older than that
// consumer's window, and the applied inbox queue rows received as long
// ago: the inbox half of the purge c's relay runs while it leads, for a
// process that receives without running a relay (mensageria receive).
// Every replica may run it: the deletes are bounded and do not conflict.
// It returns how many records and applied queue rows it deleted, with the
// first error, which ends the pass.
func (c *Client) PurgeInbox(ctx context.Context) (records, appliedRows int, err error) {
	for ctx.Err() == nil {
		res, err := c.drv.Purge(ctx, driver.PurgeParams{App: c.cfg.App, Batch: purgeBatch})
		if err != nil {
			return records, appliedRows, err
		}
		records += res.Inbox
		appliedRows += res.InboxQueue
		if res.Inbox < purgeBatch && res.InboxQueue < purgeBatch {
			break
		}
	}
	return records, appliedRows, ctx.Err()
}

// failedQuietly logs a failed step of maintenance, unless the database
// could not be reached: the relay's failure health logs that streak once.
func (m *maintenance) failedQuietly(msg string, err error) {
	if unreachable(err) {
		m.failures.failed(FailureDatabase, err)
		return
	}
	m.cfg.Logger.Warn(msg, "app", m.cfg.App, "err", err)
}

// purgeTypes are the types whose delivered rows this relay purges: its
// own, less any the catalog gives another app now (whose retention is that
// app's to apply).
func (m *maintenance) purgeTypes() []string {
	if len(m.rts) == 0 {
		return m.types
	}
	var out []string
	for _, rt := range m.rts {
		t, _ := rt.claimable()
		out = append(out, t...)
	}
	if len(out) == len(m.types) {
		return m.types
	}
	return out
}

// recordRoutes writes the routes' states to the database while this relay
// leads: every route when it becomes the leader (replacing what an earlier
// relay of the app left), then each route that changed. Writes happen on
// transitions only, off the delivery path; a failed write is logged once
// and tried again at the next signal or poll.
func (m *maintenance) recordRoutes() {
	if len(m.rts) == 0 {
		return
	}
	var failing bool
	wasLeader := false
	t := time.NewTicker(m.cfg.PollInterval * 5)
	defer t.Stop()
	for {
		select {
		case <-m.runCtx.Done():
			return
		case <-m.record:
		case <-t.C:
		}
		if !m.lead.isLeader() {
			wasLeader = false
			continue
		}
		replace := !wasLeader
		if m.replaceRoutes.Swap(false) {
			replace = true
		}
		states, took := m.changedRoutes(replace)
		if len(states) == 0 && !replace {
			wasLeader = true
			continue
		}
		ctx, cancel := context.WithTimeout(m.runCtx, settleTimeout)
		err := m.drv.SetRouteStates(ctx, driver.RouteStatesParams{App: m.cfg.App, States: states, Replace: replace})
		cancel()
		if err != nil {
			for _, rt := range took {
				rt.mu.Lock()
				rt.dirty = true
				rt.mu.Unlock()
			}
			if replace {
				m.replaceRoutes.Store(true)
			}
			if !failing && m.runCtx.Err() == nil {
				m.failedQuietly("recording the routes' states failed; 'mensageria status' shows older ones until a write succeeds", err)
			}
			failing = true
			continue
		}
		failing = false
		wasLeader = true
	}
}

// changedRoutes takes the states to record, of every route (all) or of
// those changed since they were last taken, and the routes they are of.
func (m *maintenance) changedRoutes(all bool) ([]driver.RouteState, []*route) {
	var states []driver.RouteState
	var took []*route
	for _, rt := range m.rts {
		rt.mu.Lock()
		if rt.dirty || all {
			h := rt.healthLocked()
			rt.dirty = false
			took = append(took, rt)
			for _, typ := range rt.types {
				if _, gone := rt.notOwned[typ]; gone {
					continue // its owner's relay records it
				}
				states = append(states, driver.RouteState{Type: typ, App: m.cfg.App, Route: h.Route, State: string(h.State),
					Since: h.Since, Until: h.Until, Failures: h.Failures, LastError: storable(h.LastError, maxErrorLen)})
			}
		}
		rt.mu.Unlock()
	}
	return states, took
}
