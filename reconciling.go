package mensageria

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/xadm/mensageria/driver"
)

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
