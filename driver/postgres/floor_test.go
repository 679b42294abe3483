package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testdb"
)

type floorEnv struct {
	t   *testing.T
	ctx context.Context
	d   *Driver
}

func newFloorEnv(t *testing.T, types ...string) *floorEnv {
	t.Helper()
	d, err := New(testdb.Pool(t), &Config{Schema: testdb.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	own(t, d, "floor-test", types...)
	return &floorEnv{t: t, ctx: context.Background(), d: d}
}

func (e *floorEnv) exec(tx pgx.Tx, sql string, args ...any) {
	e.t.Helper()
	var err error
	if tx != nil {
		_, err = tx.Exec(e.ctx, sql, args...)
	} else {
		_, err = e.d.pool.Exec(e.ctx, sql, args...)
	}
	if err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// claim claims up to limit rows of typ and returns their keys, in claim
// order, and whether the claim was a sweep.
func (e *floorEnv) claim(typ string, limit int, lease time.Duration, ordered ...string) ([]string, bool) {
	e.t.Helper()
	before := e.sweeps()
	jobs, err := e.d.Claim(e.ctx, driver.ClaimParams{Types: []string{typ}, OrderedTypes: ordered, Limit: limit, Lease: lease, Token: 7})
	if err != nil {
		e.t.Fatal(err)
	}
	keys := make([]string, len(jobs))
	for i, j := range jobs {
		keys[i] = j.Key
	}
	return keys, e.sweeps() > before
}

func (e *floorEnv) sweeps() int {
	e.d.floors.mu.Lock()
	defer e.d.floors.mu.Unlock()
	return e.d.floors.sweeps
}

// sweepNow makes the next claim of every type a sweep.
func (e *floorEnv) sweepNow() {
	e.d.floors.mu.Lock()
	defer e.d.floors.mu.Unlock()
	for _, fl := range e.d.floors.byType {
		fl.every = 0
	}
}

// never stops the sweeps the period would bring, so that a test sees what
// the floor alone does.
func (e *floorEnv) never() {
	e.d.floors.mu.Lock()
	defer e.d.floors.mu.Unlock()
	e.d.floors.sweepMin, e.d.floors.sweepMax = time.Hour, time.Hour
}

func (e *floorEnv) window(w time.Duration) {
	e.d.floors.mu.Lock()
	defer e.d.floors.mu.Unlock()
	e.d.floors.window = w
}

var errUndo = errors.New("undo")

func equalKeys(got []string, want ...string) bool {
	return fmt.Sprint(got) == fmt.Sprint(want)
}

// A transaction that enqueued before a claim and commits after it, within
// the window, is taken by the next claim: no sweep needed.
func TestClaimFloorTakesALateCommitWithinTheWindow(t *testing.T) {
	e := newFloorEnv(t, "t")
	e.never()
	e.window(time.Minute) // so that a slow machine cannot turn "late" into "later than the window"
	out := e.d.table("outbox")
	e.exec(nil, "INSERT INTO "+out+" (type, key) VALUES ('t', 'first')")
	if keys, sweep := e.claim("t", 10, time.Minute); !equalKeys(keys, "first") || !sweep {
		t.Fatalf("first claim took %v (sweep %v), want [first] in a sweep", keys, sweep)
	}
	tx, err := e.d.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	e.exec(tx, "INSERT INTO "+out+" (type, key) VALUES ('t', 'late')") // available_at: tx's start, before the next claim
	e.exec(nil, "INSERT INTO "+out+" (type, key) VALUES ('t', 'on-time')")
	if keys, sweep := e.claim("t", 10, time.Minute); !equalKeys(keys, "on-time") || sweep {
		t.Fatalf("claim took %v (sweep %v), want [on-time] from the floor", keys, sweep)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if keys, sweep := e.claim("t", 10, time.Minute); !equalKeys(keys, "late") || sweep {
		t.Fatalf("claim after the late commit took %v (sweep %v), want [late] from the floor", keys, sweep)
	}
}

// A row that becomes due below a floor — committed later than the window,
// or leased by a relay that died — waits for the next sweep and is taken
// by it: never skipped.
func TestClaimFloorLeavesRowsBelowItToTheSweep(t *testing.T) {
	e := newFloorEnv(t, "t")
	e.never()
	e.window(0)
	out := e.d.table("outbox")
	e.exec(nil, "INSERT INTO "+out+" (type, key) VALUES ('t', 'first')")
	if keys, _ := e.claim("t", 10, time.Minute); !equalKeys(keys, "first") {
		t.Fatalf("first claim took %v", keys)
	}
	tx, err := e.d.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	e.exec(tx, "INSERT INTO "+out+" (type, key) VALUES ('t', 'late')")
	e.exec(nil, "INSERT INTO "+out+" (type, key) VALUES ('t', 'on-time')")
	// Leased for a microsecond: as if its relay was killed at once.
	if keys, sweep := e.claim("t", 10, time.Microsecond); !equalKeys(keys, "on-time") || sweep {
		t.Fatalf("claim took %v (sweep %v), want [on-time] from the floor", keys, sweep)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	// Both due now, both below the floor.
	if keys, sweep := e.claim("t", 10, time.Minute); len(keys) != 0 || sweep {
		t.Fatalf("claim from the floor took %v (sweep %v), want nothing: both rows are below it", keys, sweep)
	}
	e.sweepNow()
	if keys, sweep := e.claim("t", 10, time.Minute); !equalKeys(keys, "late", "on-time") || !sweep {
		t.Fatalf("sweep took %v (sweep %v), want [late on-time]", keys, sweep)
	}
}

// A backlog larger than a claim goes on from the last row taken, in order,
// each row once.
func TestClaimFloorWalksABacklogInOrder(t *testing.T) {
	e := newFloorEnv(t, "t")
	e.never()
	e.window(0)
	// One statement: every row has the same available_at, so only the id
	// tells where the previous claim stopped.
	e.exec(nil, "INSERT INTO "+e.d.table("outbox")+" (type, key) SELECT 't', lpad(g::text, 4, '0') FROM generate_series(1, 1200) g")
	var all []string
	for i, want := range []int{500, 500, 200, 0} {
		keys, sweep := e.claim("t", 500, time.Minute)
		if len(keys) != want || sweep != (i == 0) {
			t.Fatalf("claim %d took %d rows (sweep %v), want %d (sweep %v)", i, len(keys), sweep, want, i == 0)
		}
		all = append(all, keys...)
	}
	for i, k := range all {
		if k != fmt.Sprintf("%04d", i+1) {
			t.Fatalf("row %d of the backlog is %s", i, k)
		}
	}
}

// Ordered types claim with no floor: the next row of a key becomes due when
// the previous one settles, however old it is.
func TestClaimFloorIsNotUsedForOrderedTypes(t *testing.T) {
	e := newFloorEnv(t, "o")
	e.never()
	e.window(0)
	e.exec(nil, "INSERT INTO "+e.d.table("outbox")+" (type, key, payload) VALUES ('o', 'k', '1'), ('o', 'k', '2')")
	jobs, err := e.d.Claim(e.ctx, driver.ClaimParams{Types: []string{"o"}, OrderedTypes: []string{"o"}, Limit: 10, Lease: time.Minute, Token: 7})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("first claim: %v, %v", jobs, err)
	}
	if _, err := e.d.Settle(e.ctx, driver.SettleParams{Token: 7, Delivered: []int64{jobs[0].ID}}); err != nil {
		t.Fatal(err)
	}
	jobs, err = e.d.Claim(e.ctx, driver.ClaimParams{Types: []string{"o"}, OrderedTypes: []string{"o"}, Limit: 10, Lease: time.Minute, Token: 7})
	if err != nil || len(jobs) != 1 || string(jobs[0].Payload) != "2" {
		t.Fatalf("the key's second row, due once the first settled: %v, %v", jobs, err)
	}
}

// With the xmin horizon pinned, the entries of delivered rows stay in the
// claim index. A claim from the floor does not walk them; a sweep does.
// Counted in buffers (EXPLAIN ANALYZE of the driver's own statement), not
// in time.
func TestClaimFromTheFloorStepsOverNoDeliveredEntries(t *testing.T) {
	e := newFloorEnv(t, "t")
	out := e.d.table("outbox")
	pin, err := e.d.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pin.Rollback(e.ctx) }()
	e.exec(pin, "SELECT txid_current()")
	// 5,000 rows enqueued, claimed and delivered (deleted) an hour ago...
	e.exec(nil, "INSERT INTO "+out+" (type, key, available_at) SELECT 't', 'd' || g, now() - interval '1 hour' FROM generate_series(1, 5000) g")
	e.exec(nil, "UPDATE "+out+" SET lease_token = 1, lease_until = now() + interval '1 minute' WHERE type = 't'")
	e.exec(nil, "DELETE FROM "+out+" WHERE type = 't'")
	// ... and one due now.
	e.exec(nil, "INSERT INTO "+out+" (type, key) VALUES ('t', 'now')")
	buffers := func(floor pgtype.Timestamptz) float64 {
		t.Helper()
		var plan string
		err := pgx.BeginFunc(e.ctx, e.d.pool, func(tx pgx.Tx) error {
			for _, set := range []string{"SET LOCAL plan_cache_mode = force_custom_plan", "SET LOCAL enable_bitmapscan = off"} {
				if _, err := tx.Exec(e.ctx, set); err != nil {
					return err
				}
			}
			if err := tx.QueryRow(e.ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+e.d.q.claim,
				[]string{"t"}, 100, int64(1), 30*time.Second, []bool{false}, "", int64(0),
				[]pgtype.Timestamptz{floor}, []int64{0}).Scan(&plan); err != nil {
				return err
			}
			return errUndo // the claim ran; roll it back
		})
		if !errors.Is(err, errUndo) {
			t.Fatal(err)
		}
		var tree []map[string]any
		if err := json.Unmarshal([]byte(plan), &tree); err != nil {
			t.Fatal(err)
		}
		var claimIdx float64
		walk(tree[0]["Plan"], func(n map[string]any) {
			if n["Index Name"] == "outbox_claim_idx" {
				claimIdx = n["Shared Hit Blocks"].(float64) + n["Shared Read Blocks"].(float64)
			}
		})
		return claimIdx
	}
	sweep := buffers(noFloor)
	fromFloor := buffers(pgtype.Timestamptz{Time: time.Now().Add(-time.Minute), Valid: true})
	// Each delivered row's entry sends the sweep to the heap: a thousand
	// buffers or so. From the floor: the one live entry's leaf and its row.
	if sweep < 200 || fromFloor > 10 {
		t.Fatalf("claim index scan buffers: sweep %v (want ≥ 200), from the floor %v (want ≤ 10)", sweep, fromFloor)
	}
	t.Logf("buffers of the claim index scan with 5,000 delivered entries held by a pinned horizon: sweep %v, from the floor %v", sweep, fromFloor)
}

// A sweep is spaced by what it costs over a claim from the floor: a busy
// server that slows every claim alike keeps sweeping every sweepMin; a
// pinned horizon that makes the sweep walk its dead entries spaces them
// out, up to sweepMax.
func TestSweepPeriodFollowsTheSweepsExtraCost(t *testing.T) {
	f := newFloors()
	types, ordered := []string{"t"}, []bool{false}
	now := time.Unix(1000, 0)
	claim := func(took time.Duration) bool {
		p := f.plan(types, ordered, now, 0)
		f.claimed(types, ordered, p, now, time.Second, took, 1, 10, nil, now)
		return p.sweep
	}
	if !claim(time.Millisecond) {
		t.Fatal("the first claim of a type must be a sweep")
	}
	now = now.Add(2 * time.Second)
	if !claim(time.Millisecond) {
		t.Fatal("no sweep one lease after the first claim")
	}
	for range 50 { // claims from the floor of 20ms each: a slow server
		if claim(20 * time.Millisecond) {
			t.Fatal("a claim within the sweep period swept")
		}
	}
	period := func() time.Duration { return f.byType["t"].every }
	now = now.Add(time.Hour)
	if !claim(22 * time.Millisecond) {
		t.Fatal("no sweep once the period passed")
	}
	if p := period(); p != sweepMin {
		t.Fatalf("a sweep costing what a claim costs: period %v, want %v", p, sweepMin)
	}
	now = now.Add(time.Hour)
	claim(40 * time.Millisecond) // ~20ms over a claim: 4s
	if p := period(); p < 3*time.Second || p > 5*time.Second {
		t.Fatalf("a sweep 20ms dearer than a claim: period %v, want about 4s", p)
	}
	now = now.Add(time.Hour)
	claim(time.Second)
	if p := period(); p != sweepMax {
		t.Fatalf("a sweep of a second: period %v, want the cap %v", p, sweepMax)
	}
}

// A row's claim order is when it was inserted (migration 6): a transaction
// that began before a claim and enqueues after it commits a row above that
// claim's floor, found from the floor, with no sweep.
func TestClaimFloorTakesARowEnqueuedAfterTheClaimByAnOlderTransaction(t *testing.T) {
	e := newFloorEnv(t, "t")
	e.never()
	e.window(0) // even with no window at all
	out := e.d.table("outbox")
	e.exec(nil, "INSERT INTO "+out+" (type, key) VALUES ('t', 'first')")
	if keys, _ := e.claim("t", 10, time.Minute); !equalKeys(keys, "first") {
		t.Fatalf("first claim took %v", keys)
	}
	tx, err := e.d.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	e.exec(tx, "SELECT 1 FROM "+out+" LIMIT 1") // the business work before the enqueue
	e.exec(nil, "INSERT INTO "+out+" (type, key) VALUES ('t', 'meanwhile')")
	if keys, sweep := e.claim("t", 10, time.Minute); !equalKeys(keys, "meanwhile") || sweep {
		t.Fatalf("claim took %v (sweep %v), want [meanwhile] from the floor", keys, sweep)
	}
	e.exec(tx, "INSERT INTO "+out+" (type, key) VALUES ('t', 'enqueued-last')")
	var began, at time.Time
	if err := tx.QueryRow(e.ctx, "SELECT now(), available_at FROM "+out+" WHERE key = 'enqueued-last'").Scan(&began, &at); err != nil {
		t.Fatal(err)
	}
	if !at.After(began) {
		t.Fatalf("available_at %v is the transaction's start %v, not the insert's clock", at, began)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	if keys, sweep := e.claim("t", 10, time.Minute); !equalKeys(keys, "enqueued-last") || sweep {
		t.Fatalf("claim took %v (sweep %v), want [enqueued-last] from the floor", keys, sweep)
	}
}

// sweepAfter stops the period's sweeps, as never does, but lets a sweep
// that a settle makes due come after min.
func (e *floorEnv) sweepAfter(min time.Duration) {
	e.d.floors.mu.Lock()
	defer e.d.floors.mu.Unlock()
	e.d.floors.sweepMin, e.d.floors.sweepMax = min, time.Hour
	for _, fl := range e.d.floors.byType {
		fl.every = time.Hour
	}
}

// A relay killed mid-batch leaves its rows leased, below the floor of the
// relay that takes over; they are due one lease after the new relay's
// first claim at the latest, and its claim then is a sweep that takes
// them, not the period's (a minute when sweeps are dear).
func TestClaimFloorSweepsOneLeaseAfterTheFirstClaim(t *testing.T) {
	e := newFloorEnv(t, "t")
	e.never()
	e.window(0)
	out := e.d.table("outbox")
	killed, err := New(e.d.pool, &Config{Schema: e.d.schema})
	if err != nil {
		t.Fatal(err)
	}
	e.exec(nil, "INSERT INTO "+out+" (type, key) VALUES ('t', 'held')")
	const lease = 1500 * time.Millisecond
	if jobs, err := killed.Claim(e.ctx, driver.ClaimParams{Types: []string{"t"}, Limit: 10, Lease: 300 * time.Millisecond, Token: 9}); err != nil || len(jobs) != 1 {
		t.Fatalf("the killed relay's claim: %v, %v", jobs, err)
	}
	e.exec(nil, "INSERT INTO "+out+" (type, key) VALUES ('t', 'next')")
	began := time.Now()
	if keys, sweep := e.claim("t", 10, lease); !equalKeys(keys, "next") || !sweep {
		t.Fatalf("first claim took %v (sweep %v), want [next] in a sweep", keys, sweep)
	}
	e.exec(nil, "DELETE FROM "+out+" WHERE key = 'next'") // delivered
	time.Sleep(500 * time.Millisecond)                    // the killed relay's lease ran out
	if keys, sweep := e.claim("t", 10, lease); len(keys) != 0 || sweep {
		t.Fatalf("claim from the floor took %v (sweep %v), want nothing: [held] is below it", keys, sweep)
	}
	time.Sleep(time.Until(began.Add(lease + 50*time.Millisecond)))
	if keys, sweep := e.claim("t", 10, lease); !equalKeys(keys, "held") || !sweep {
		t.Fatalf("claim one lease after the first took %v (sweep %v), want [held] in a sweep", keys, sweep)
	}
	if _, sweep := e.claim("t", 10, lease); sweep {
		t.Fatal("a second sweep: the one a takeover makes due is made once")
	}
}

// Rows a settle released, or found with their lease run out, are due now
// below the floor: the next claim is a sweep, once sweepMin has passed
// since the last one.
func TestClaimFloorSweepsAfterASettleLeftRowsDue(t *testing.T) {
	e := newFloorEnv(t, "t")
	e.never()
	e.window(0)
	out := e.d.table("outbox")
	e.exec(nil, "INSERT INTO "+out+" (type, key) VALUES ('t', 'released')")
	lastSweep := time.Now()
	jobs, err := e.d.Claim(e.ctx, driver.ClaimParams{Types: []string{"t"}, Limit: 10, Lease: time.Minute, Token: 7})
	if err != nil || len(jobs) != 1 || jobs[0].Key != "released" {
		t.Fatalf("first claim (a sweep): %v, %v", jobs, err)
	}
	released := jobs[0].ID
	e.exec(nil, "INSERT INTO "+out+" (type, key) VALUES ('t', 'expired')")
	jobs, err = e.d.Claim(e.ctx, driver.ClaimParams{Types: []string{"t"}, Limit: 10, Lease: time.Millisecond, Token: 8})
	if err != nil || len(jobs) != 1 || jobs[0].Key != "expired" {
		t.Fatalf("claim: %v, %v", jobs, err)
	}
	expired := jobs[0].ID
	e.sweepAfter(300 * time.Millisecond)
	if res, err := e.d.Settle(e.ctx, driver.SettleParams{Token: 7, Release: []int64{released}}); err != nil || len(res.Settled) != 1 {
		t.Fatalf("release: %+v, %v", res, err)
	}
	time.Sleep(5 * time.Millisecond) // token 8's lease ran out
	if res, err := e.d.Settle(e.ctx, driver.SettleParams{Token: 8, Delivered: []int64{expired}}); err != nil || len(res.Expired) != 1 {
		t.Fatalf("settle of a lease run out: %+v, %v", res, err)
	}
	if time.Since(lastSweep) < 250*time.Millisecond {
		if keys, sweep := e.claim("t", 10, time.Minute); len(keys) != 0 || sweep {
			t.Fatalf("claim within sweepMin of the last sweep took %v (sweep %v), want nothing from the floor", keys, sweep)
		}
	}
	time.Sleep(time.Until(lastSweep.Add(350 * time.Millisecond)))
	if keys, sweep := e.claim("t", 10, time.Minute); !equalKeys(keys, "released", "expired") || !sweep {
		t.Fatalf("claim after the settles took %v (sweep %v), want [released expired] in a sweep", keys, sweep)
	}
	if _, sweep := e.claim("t", 10, time.Minute); sweep {
		t.Fatal("a second sweep after the one the settles made due")
	}
}

// What the floors schedule, on a clock of their own: a new fence epoch is
// a takeover like a first claim, and a settle that failed makes a sweep
// due one lease later, when the leases it may have left run out.
func TestSweepsFollowTakeoversAndFailedSettles(t *testing.T) {
	f := newFloors()
	f.sweepMax = time.Hour
	types, ordered := []string{"t"}, []bool{false}
	now := time.Unix(1000, 0)
	const lease = 10 * time.Second
	claim := func(epoch int64) bool {
		p := f.plan(types, ordered, now, epoch)
		f.claimed(types, ordered, p, now, lease, time.Millisecond, 1, 10, nil, now)
		return p.sweep
	}
	steps := []struct {
		name  string
		after time.Duration
		epoch int64
		want  bool
	}{
		{"first claim", 0, 1, true},
		{"within the lease", lease / 2, 1, false},
		{"one lease after the first", lease/2 + 10*time.Millisecond, 1, true},
		{"then from the floor", time.Second, 1, false},
		{"a new epoch's first claim, from the floor", 0, 2, false},
		{"one lease after the new epoch's first claim", lease + 10*time.Millisecond, 2, true},
		{"then from the floor again", time.Second, 2, false},
	}
	for _, s := range steps {
		f.get("t").every = time.Hour
		now = now.Add(s.after)
		if got := claim(s.epoch); got != s.want {
			t.Fatalf("%s: sweep %v, want %v", s.name, got, s.want)
		}
	}
	f.settleFailed(now)
	now = now.Add(lease - time.Millisecond)
	if claim(2) {
		t.Fatal("a sweep before the failed settle's leases ran out")
	}
	now = now.Add(2 * time.Millisecond)
	if !claim(2) {
		t.Fatal("no sweep one lease after a settle that failed")
	}
}
