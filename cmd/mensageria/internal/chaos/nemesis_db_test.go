package chaos

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"
)

// The database's faults, injected on the run's private server
// (docs/reliability.md, "Database faults"), named as on PostgreSQL; a
// backend's faultName names them in its own figures.
const (
	// Immediate stop (a crash) with the WAL writer held for a second
	// before it, down for a second, then started: crash recovery. Under
	// the producers' synchronous commits.
	FaultPGCrash = "pg-crash"
	// The same with the producers waiting: only asynchronous commits (the
	// relays' claims and settles, the receivers' effects) are made in
	// that second, and the crash loses them.
	FaultPGCrashAsync = "pg-crash-async"
	// Fast shutdown and start: every session ended, nothing lost.
	FaultPGRestart = "pg-restart-fast"
	// Other sessions take every connection slot but the superusers', and
	// the workers' sessions are ended: they cannot reconnect until freed.
	FaultPGConns = "pg-max-connections"
	// A privilege taken from one app's relay role, then granted back.
	FaultPGRevoke = "pg-revoke"
	// A transaction holds a snapshot, pinning the xmin horizon: nothing
	// dead since can be vacuumed while it lasts.
	FaultPGXmin = "pg-xmin-pin"
)

// Figures of the database faults, shown with the faults (not kinds).
const (
	figLostLeases    = "pg-crash-lost-lease-events"  // claims and settles lost, at least
	figLostEffects   = "pg-crash-lost-effects"       // receivers' effects lost with their settles, at least
	figCommitUnknown = "producer-commit-unknown"     // business commits whose answer a fault took
	figHogConns      = "pg-max-connections-held"     // slots held by other sessions, summed
	figHogRefused    = "pg-max-connections-refusals" // the server's refusals the filling sessions saw
	figHogEnded      = "pg-max-connections-ended"    // workers' sessions ended while the slots were full
	figXminAge       = "pg-xmin-pinned-xids"         // transactions the pinned horizon fell behind, summed
	figUnready       = "relay-unready"               // relays reporting themselves unready
)

var dbNemesisKinds = []string{FaultPGCrash, FaultPGRestart, FaultPGCrashAsync, FaultPGConns, FaultPGRevoke, FaultPGXmin}

// Every round of the nemesis ends with the database's faults.
func init() { nemesisKinds = append(nemesisKinds, dbNemesisKinds...) }

// revocations are taken in turn: what a relay needs to settle a delivered
// row (claims go on, settles fail: the relay must neither redeliver its
// backlog every lease nor call itself ready), to claim, and to reach its
// tables at all (its election too).
var revocations = []string{"delete", "update", "usage"}

// dbHolds are how long the slots are held and the horizon pinned: a few
// seconds in the short profile, three times that in the long one.
func (p profile) dbHolds() (conns, xmin time.Duration) {
	return 3 * p.gap, 5 * p.gap
}

// dbState is what the database faults keep between rounds.
type dbState struct {
	revokes   int
	producers sync.RWMutex // held by the nemesis: no business transaction runs
}

// errNoSlot is a session the server refused for want of a free slot.
var errNoSlot = errors.New("no free connection slot")

// skips reports a fault of the schedule that has no meaning on the run's
// database: a quiet crash takes the asynchronous commits, and where every
// commit is durable there are none.
func (h *harness) skips(kind string) bool {
	return kind == FaultPGCrashAsync && h.be.durable()
}

// dbFault injects one database fault and returns once it is healed.
func (h *harness) dbFault(ctx context.Context, kind, a string) {
	switch kind {
	case FaultPGCrash, FaultPGCrashAsync:
		h.crash(ctx, kind)
	case FaultPGRestart:
		h.logf("nemesis: %s restart (%s)", h.be.kind(), h.be.faultName(kind))
		if err := h.be.restart(h.ctx); err != nil {
			h.t.Errorf("restart: %v", err)
		}
	case FaultPGConns:
		h.exhaust(ctx)
	case FaultPGRevoke:
		h.revoke(ctx, a)
	case FaultPGXmin:
		h.be.pinHorizon(ctx, h)
	}
}

// crash stops the server at once with the WAL writer held for a second
// before: the claims, settles and effects committed asynchronously in that
// second that no synchronous commit wrote out are lost, and the relays
// must redeliver what they thought settled. A quiet crash
// (FaultPGCrashAsync) is the widest loss: the relays pause for a second
// while the producers enqueue, then the producers wait, so that the
// relays work through that backlog with no synchronous commit to write
// their work out. A busy one lands on open business transactions, whose
// commits must come back or be known not to have happened. Where every
// commit is durable, nothing may be lost: a loss fails the run.
func (h *harness) crash(ctx context.Context, kind string) {
	if kind == FaultPGCrashAsync {
		var paused []*proc
		for _, a := range apps {
			for _, r := range h.relays[a] {
				r.signal(syscall.SIGSTOP)
				paused = append(paused, r)
			}
		}
		sleepCtx(ctx, time.Second)
		h.dbs.producers.Lock()
		defer h.dbs.producers.Unlock()
		defer func() {
			for _, r := range paused {
				r.signal(syscall.SIGCONT)
			}
		}()
	}
	var floorL, floorE int64
	_ = h.be.queryRow(h.ctx, "SELECT coalesce(max(seq), 0) FROM "+h.be.table("chaos_leases")).Scan(&floorL)
	_ = h.be.queryRow(h.ctx, "SELECT coalesce(max(seq), 0) FROM "+h.be.table("chaos_effects")).Scan(&floorE)
	release, err := h.be.holdWAL(h.ctx)
	if err != nil {
		h.t.Errorf("hold the WAL: %v", err)
		return
	}
	defer release()
	if kind == FaultPGCrashAsync {
		for _, a := range apps {
			for _, r := range h.relays[a] {
				r.signal(syscall.SIGCONT)
			}
		}
	}
	sleepCtx(ctx, time.Second)
	// What was visible just before the crash; less of it after is what
	// the crash took (a lower bound: commits after these reads are not
	// counted).
	seen := func(table string, floor int64) (top, n int64) {
		_ = h.be.queryRow(h.ctx, "SELECT coalesce(max(seq), $1), count(*) FROM "+h.be.table(table)+" WHERE seq > $1", floor).Scan(&top, &n)
		return top, n
	}
	topL, preL := seen("chaos_leases", floorL)
	topE, preE := seen("chaos_effects", floorE)
	h.logf("nemesis: %s crash (%s)", h.be.kind(), h.be.faultName(kind))
	if err := h.be.crash(); err != nil {
		h.t.Errorf("crash: %v", err)
	}
	release()
	sleepCtx(ctx, time.Second)
	start := time.Now()
	if err := h.be.start(h.ctx); err != nil {
		h.t.Errorf("start after the crash: %v", err)
		return
	}
	kept := func(table string, floor, top int64) int64 {
		var n int64
		_ = h.be.queryRow(h.ctx, "SELECT count(*) FROM "+h.be.table(table)+" WHERE seq > $1 AND seq <= $2", floor, top).Scan(&n)
		return n
	}
	lostL := max(preL-kept("chaos_leases", floorL, topL), 0)
	lostE := max(preE-kept("chaos_effects", floorE, topE), 0)
	h.fault(h.be.faultName(figLostLeases), int(lostL))
	h.fault(h.be.faultName(figLostEffects), int(lostE))
	h.logf("nemesis: %s back after crash recovery in %s; lost at least %d lease events and %d effects",
		h.be.kind(), time.Since(start).Round(time.Millisecond), lostL, lostE)
	if h.be.durable() && lostL+lostE > 0 {
		// docs/reliability.md, "On MariaDB".
		h.t.Errorf("%s lost %d committed lease events and %d effects in a crash (%s)", h.be.kind(), lostL, lostE, h.be.faultName(kind))
	}
}

// exhaust opens sessions of another role until the server refuses them,
// ends the workers' sessions, and keeps every slot it can get (the workers
// compete for the ones they free) for the hold. The harness keeps its own
// way in: the superusers' slots on PostgreSQL, the extra port on MariaDB.
func (h *harness) exhaust(ctx context.Context) {
	hold, _ := h.p.dbHolds()
	var mu sync.Mutex
	var conns []func()
	refused := 0
	defer func() {
		for _, closeConn := range conns {
			closeConn()
		}
	}()
	// connect opens one more session; false once the server refused it.
	connect := func() (bool, error) {
		c, err := h.be.connectHog(h.ctx)
		switch {
		case errors.Is(err, errNoSlot):
			mu.Lock()
			refused++
			mu.Unlock()
			return false, nil
		case err != nil:
			return false, err
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		return true, nil
	}
	for ctx.Err() == nil {
		ok, err := connect()
		if err != nil {
			h.t.Errorf("fill the connection slots: %v", err)
			return
		}
		if !ok {
			break
		}
	}
	ended, err := h.be.endWorkers(h.ctx, h)
	if err != nil {
		h.t.Errorf("end the workers' sessions: %v", err)
	}
	until := time.Now().Add(hold)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(until) && ctx.Err() == nil {
				ok, err := connect()
				if err != nil {
					h.t.Errorf("fill the connection slots: %v", err)
					return
				}
				if !ok {
					sleepCtx(ctx, 10*time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	h.fault(h.be.faultName(figHogConns), len(conns))
	h.fault(h.be.faultName(figHogRefused), refused)
	h.fault(h.be.faultName(figHogEnded), ended)
	h.logf("nemesis: %d other sessions held every free connection slot for %s; %d worker sessions ended", len(conns), hold, ended)
}

// revoke takes the next of revocations from app a's relay role for one
// and a half leases, then gives it back.
func (h *harness) revoke(ctx context.Context, a string) {
	r := revocations[h.dbs.revokes%len(revocations)]
	h.dbs.revokes++
	take, give := h.be.revocation(r, a)
	hold := h.p.lease + h.p.lease/2
	h.logf("nemesis: REVOKE %s from %s for %s (%d statements)", r, relayRole(a), hold, len(take))
	for _, q := range take {
		if err := h.be.exec(h.ctx, q); err != nil {
			h.t.Errorf("%s: %v", q, err)
		}
	}
	sleepCtx(ctx, hold)
	for _, q := range give {
		if err := h.be.exec(h.ctx, q); err != nil {
			h.t.Errorf("%s: %v", q, err)
		}
	}
	h.fault(h.be.faultName(FaultPGRevoke)+"-"+r, 1)
}
