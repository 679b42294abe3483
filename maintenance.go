package mensageria

import (
	"context"
	"sync"
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
// messages in doubt (reconcile, in atmostonce.go).
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

	purgedSignal testsignal.Signal[driver.PurgeResult]
}

// run starts the periodic loops on bg; they end with the relay's run
// context.
func (m *maintenance) run(bg *sync.WaitGroup) {
	bg.Go(m.purge)
	bg.Go(m.recordRoutes)
	bg.Go(m.reconcile)
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

// purgeAll purges a batch at a time until one is not full.
func (m *maintenance) purgeAll() {
	for m.runCtx.Err() == nil {
		res, err := m.drv.Purge(m.runCtx, driver.PurgeParams{
			App:             m.cfg.App,
			Types:           m.types,
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
		if res.Outbox < purgeBatch && res.Inbox < purgeBatch {
			return
		}
	}
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
		states, took := m.changedRoutes(replace)
		if len(states) == 0 {
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
				states = append(states, driver.RouteState{Type: typ, App: m.cfg.App, Route: h.Route, State: string(h.State),
					Since: h.Since, Until: h.Until, Failures: h.Failures, LastError: storable(h.LastError, maxErrorLen)})
			}
		}
		rt.mu.Unlock()
	}
	return states, took
}
