package postgres

import (
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/xadm/mensageria/driver"
)

// Claim floors (docs/adr/0019-claim-floor.md). A claim that walks the claim
// index from its oldest entry steps over the entries of every row already
// delivered and not yet vacuumed; while a transaction holds the xmin horizon
// (an idle session, a long report, a replica's feedback) none of them can
// go, and every claim walks them all: 100,000 of them cost a claim 60-80 ms.
// So each type's scan starts at a floor, (available_at, id), below which
// the previous claims left nothing to take:
//
//   - after a claim that took fewer rows than it asked for, everything due
//     at or above the old floor was taken (or is locked or leased); the new
//     floor is that claim's now() minus claimWindow, so that a transaction
//     that enqueued before the claim and commits within claimWindow after it
//     is still found by the next claim;
//   - after a claim that took all it asked for (a backlog), the floor is
//     also at most the last row it took: the backlog goes on from there.
//
// A row can still become due below a floor: a transaction that committed
// more than claimWindow after its row's available_at, a lease that ran out
// (a relay killed mid-batch), a released row, a row another session held
// locked when the claim passed it. A sweep — a claim with no floor — takes
// them: the first claim of each type, and then one every period that grows
// with what a sweep costs over a claim from the floor (sweepCost times the
// difference, between sweepMin and sweepMax), so that sweeps stall the
// claims no more than 1/sweepCost of the time even while the horizon is
// pinned, and a busy server, which slows every claim alike, does not space
// them out. A row below a floor therefore waits at most one sweep period
// (sweepMax); it is never skipped for good. Ordered types always claim with no floor: their rows
// become due when the key's previous row settles, whatever their age.
//
// The rows that become due below a floor at a moment the driver can tell
// do not wait for the period (ADR 0019, amendment of 2026-12-02); a sweep
// is due:
//
//   - one lease after the driver takes a type over (its first claim of the
//     type, or its first under a new fence epoch): every lease another
//     relay held then, a predecessor killed mid-batch, has run out by then
//     if it ran with the same lease;
//   - at once after a settle that released rows or found leases run out
//     (their rows are due now), but no sooner than sweepMin after the last
//     sweep, so that a route paced below its backlog, which releases rows
//     in every batch, does not turn every claim into a sweep;
//   - one lease after a settle that failed: it may not have committed, and
//     the leases of its rows run out by then.
//
// sweepMax was 10 s: with the horizon pinned a sweep walks every entry the
// pin keeps (60-80 ms), and one every 10 s stalled enough pickups to reach
// the p99 (the stress scenario's pinned phase, 15-17 ms against 9.6 ms
// with a minute; docs/benchmarks.md, ADR 0019). On a healthy table a sweep
// costs about what a claim does, and the period stays at sweepMin.
const (
	claimWindow = time.Second
	sweepMin    = time.Second
	sweepMax    = time.Minute
	sweepCost   = 200
)

// floors are a driver's claim floors, per type.
type floors struct {
	mu     sync.Mutex
	byType map[string]*floor
	// window, sweepMin and sweepMax are the constants above; tests
	// change them.
	window, sweepMin, sweepMax time.Duration
	sweeps                     int           // sweeps run, for tests
	fast                       time.Duration // a moving average of what a claim from the floor takes
	// epoch is the fence epoch of the last claim (0 without a fence), lease
	// its lease: what a settle that failed schedules its sweep by.
	epoch int64
	lease time.Duration
}

type floor struct {
	at      time.Time // the claim scan starts at (at, id)
	id      int64
	set     bool // false until a claim took a row: sweep
	sweptAt time.Time
	every   time.Duration
	begun   bool      // the driver has claimed this type (under the current epoch)
	dueAt   time.Time // a sweep is due then (zero: none but the period's)
}

// claimPlan is what plan decided for one claim, for claimed to record.
type claimPlan struct {
	ats   []pgtype.Timestamptz
	ids   []int64
	sweep bool
	// takeover flags the types this claim takes over: the driver's first
	// claim of each, or the first under a new fence epoch (ordered types,
	// which claim with no floor, never).
	takeover []bool
}

func newFloors() *floors {
	return &floors{byType: map[string]*floor{}, window: claimWindow, sweepMin: sweepMin, sweepMax: sweepMax}
}

var noFloor = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}

// plan returns the floor of each type for a claim starting now under the
// fence epoch (0 without a fence), and whether the claim is a sweep (every
// floor -infinity).
func (f *floors) plan(types []string, ordered []bool, now time.Time, epoch int64) claimPlan {
	f.mu.Lock()
	defer f.mu.Unlock()
	if epoch != f.epoch {
		f.epoch = epoch
		for _, fl := range f.byType {
			fl.begun = false
		}
	}
	p := claimPlan{ats: make([]pgtype.Timestamptz, len(types)), ids: make([]int64, len(types)), takeover: make([]bool, len(types))}
	for i, t := range types {
		if ordered[i] {
			continue
		}
		fl := f.get(t)
		p.takeover[i] = !fl.begun
		if !fl.set || now.Sub(fl.sweptAt) >= fl.every || !fl.dueAt.IsZero() && !now.Before(fl.dueAt) {
			p.sweep = true
		}
	}
	for i, t := range types {
		p.ats[i] = noFloor
		if !p.sweep && !ordered[i] {
			fl := f.byType[t]
			p.ats[i] = pgtype.Timestamptz{Time: fl.at, Valid: true}
			p.ids[i] = fl.id
		}
	}
	return p
}

func (f *floors) get(t string) *floor {
	fl, ok := f.byType[t]
	if !ok {
		fl = &floor{every: f.sweepMin}
		f.byType[t] = fl
	}
	return fl
}

// claimed records what a claim planned as p, that began at began with
// lease and took took, did: n rows of the limit asked, the last of them (in
// claim order) last, at the database's claimNow.
func (f *floors) claimed(types []string, ordered []bool, p claimPlan, began time.Time, lease, took time.Duration, n, limit int, last *driver.Job, claimNow time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lease = lease
	if p.sweep {
		f.sweeps++
	} else {
		f.fast += (took - f.fast) / 8
	}
	at, id := claimNow.Add(-f.window), int64(0)
	if n >= limit && last != nil && (last.AvailableAt.Before(at) || last.AvailableAt.Equal(at) && last.ID < id) {
		at, id = last.AvailableAt, last.ID
	}
	for i, t := range types {
		if ordered[i] {
			continue
		}
		fl := f.get(t)
		if p.takeover[i] {
			// Leases granted before this claim end by its start on the
			// database clock plus the lease; the claim's start is at most
			// took after began.
			fl.begun = true
			fl.dueAt = began.Add(took + lease)
		}
		if p.sweep {
			fl.sweptAt = began
			fl.every = min(max((took-f.fast)*sweepCost, f.sweepMin), f.sweepMax)
			if !p.takeover[i] && !fl.dueAt.IsZero() && !began.Before(fl.dueAt) {
				fl.dueAt = time.Time{}
			}
		}
		// A claim that took nothing proves nothing: its fence may have
		// failed, and with no row it has no database clock to read.
		if n > 0 {
			fl.at, fl.id, fl.set = at, id, true
		}
	}
}

// rowsDue records a settle that released rows or found leases run out:
// those rows are due now, below the floor.
func (f *floors) rowsDue(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweepBy(now)
}

// settleFailed records a settle that failed: it may not have committed,
// and its rows' leases run out within a lease.
func (f *floors) settleFailed(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweepBy(now.Add(f.lease))
}

// sweepBy makes a sweep of every type due at due at the latest, but no
// sooner than sweepMin after the type's last sweep. f.mu is held.
func (f *floors) sweepBy(due time.Time) {
	for _, fl := range f.byType {
		d := due
		if next := fl.sweptAt.Add(f.sweepMin); fl.set && next.After(d) {
			d = next
		}
		if fl.dueAt.IsZero() || d.Before(fl.dueAt) {
			fl.dueAt = d
		}
	}
}
