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
}

type floor struct {
	at      time.Time // the claim scan starts at (at, id)
	id      int64
	set     bool // false until a claim took a row: sweep
	sweptAt time.Time
	every   time.Duration
}

func newFloors() *floors {
	return &floors{byType: map[string]*floor{}, window: claimWindow, sweepMin: sweepMin, sweepMax: sweepMax}
}

var noFloor = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}

// plan returns the floor of each type for a claim starting now, and whether
// the claim is a sweep (every floor -infinity).
func (f *floors) plan(types []string, ordered []bool, now time.Time) ([]pgtype.Timestamptz, []int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sweep := false
	for i, t := range types {
		if ordered[i] {
			continue
		}
		fl := f.get(t)
		if !fl.set || now.Sub(fl.sweptAt) >= fl.every {
			sweep = true
		}
	}
	ats := make([]pgtype.Timestamptz, len(types))
	ids := make([]int64, len(types))
	for i, t := range types {
		ats[i] = noFloor
		if !sweep && !ordered[i] {
			fl := f.byType[t]
			ats[i] = pgtype.Timestamptz{Time: fl.at, Valid: true}
			ids[i] = fl.id
		}
	}
	return ats, ids, sweep
}

func (f *floors) get(t string) *floor {
	fl, ok := f.byType[t]
	if !ok {
		fl = &floor{every: f.sweepMin}
		f.byType[t] = fl
	}
	return fl
}

// claimed records what a claim that began at began and took took did: n
// rows of the limit asked, the last of them (in claim order) last, at the
// database's claimNow.
func (f *floors) claimed(types []string, ordered []bool, sweep bool, began time.Time, took time.Duration, n, limit int, last *driver.Job, claimNow time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sweep {
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
		if sweep {
			fl.sweptAt = began
			fl.every = min(max((took-f.fast)*sweepCost, f.sweepMin), f.sweepMax)
		}
		// A claim that took nothing proves nothing: its fence may have
		// failed, and with no row it has no database clock to read.
		if n > 0 {
			fl.at, fl.id, fl.set = at, id, true
		}
	}
}
