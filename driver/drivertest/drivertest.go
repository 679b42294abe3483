// Package drivertest is the conformance suite every mensageria driver must
// pass. A backend's test calls Run with a function that gives each subtest a
// fresh, migrated, isolated database:
//
//	func TestConformance(t *testing.T) {
//		drivertest.Run(t, func(t *testing.T) *drivertest.Harness { ... })
//	}
//
// The suite only uses driver.Driver methods and the Harness hooks, so it
// holds every backend to the same contract. Where driver.go leaves a detail
// open the suite pins it down, and the backend docs must agree:
//
//   - Stats: Pending counts pending rows not under a live lease (due or
//     waiting for a retry) and not in doubt; InFlight counts pending rows
//     under a live lease (a marked row being sent included); InDoubt
//     counts marked rows not under a live lease (driver.StateInDoubt);
//     OldestPending is the age of the oldest pending row, leased or not,
//     rows in doubt left out. Scheduled counts pending rows not due yet
//     that were never attempted and have no error recorded (available_at
//     in the future, attempts 0, last_error NULL), which Pending and
//     OldestPending leave out; a row waiting for a retry is in Pending.
//   - A row inserted with a NotBefore is not claimed before it (on the
//     database clock) and is claimable once it passed; a NotBefore in the
//     past is stored as the insert's time, not below it. On an ordered
//     type a scheduled row is its key's head like any other: the key's
//     later rows, due or not, wait until it is settled.
//   - ListMessages returns rows in id order, driver.DefaultListLimit of
//     them when no Limit is given and at most driver.MaxListLimit
//     (driver.ListFilter.EffectiveLimit).
//   - Revive with neither IDs nor Types changes nothing.
//   - InsertTx that fails writes nothing, even if the caller commits
//     afterwards (the transaction may stay usable or be aborted).
//   - Rows of one Insert call get ids in the order given, so one key's
//     messages enqueued together keep their order.
//   - Settle without KeepDelivered deletes delivered rows; with it they stay
//     as delivered with DeliveredAt. Both count in Stats.DeliveredLastHr.
//   - A released row is claimable at once and its attempt is not counted;
//     an Uncounted retry waits its delay, and its attempt is not counted
//     either.
//   - The caller's open transaction may hold a write lock (SQLite), so the
//     suite never claims while one is open.
//   - A row a plain INSERT stored that the driver cannot read is claimed
//     and listed with the rest, each row read apart, with
//     driver.Job.Unreadable naming the column; it parks dead under the
//     claim's token like any row, and Stats counts it.
//   - Purge with DeliveredBefore 0 deletes every delivered row (the
//     client's DeliveredRetention 0 means keep none). InboxBefore 0 is not
//     pinned: the client never passes it (SQLite then leaves the inbox
//     alone).
//
// Subtests run in parallel, each on its own Harness, and wait on the
// database clock with short leases, so the suite takes seconds.
package drivertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

// Harness is what a backend gives each subtest.
type Harness struct {
	// Driver is migrated, empty and isolated for this test.
	Driver driver.Driver
	// Reopen returns a second, independent driver on the same database,
	// as another process would open it. The harness closes it.
	Reopen func(t *testing.T) driver.Driver
	// Begin opens a native caller transaction for InsertTx (pgx.Tx,
	// *sql.Tx).
	Begin func(ctx context.Context) (tx any, commit, rollback func() error, err error)
	// Exec runs a raw statement, for set-up that no driver method does
	// (table names through Table).
	Exec func(ctx context.Context, sql string, args ...any) error
	// Table qualifies a table name: "outbox" -> mensageria_x.outbox or
	// mensageria_outbox.
	Table func(name string) string
	// Unmigrated, when set, returns a harness like the one under test but
	// on a database where Migrate never ran (its Driver and Reopen both on
	// it). Without it the fresh-schema tests are skipped.
	Unmigrated func(t *testing.T) *Harness
	// Count runs a query that returns one integer, for checks no driver
	// method makes (the inbox queue's applied rows). Required by the inbox
	// queue tests.
	Count func(ctx context.Context, sql string, args ...any) (int64, error)
	// Unreadable returns statements (run with Exec, in order) that store
	// rows of type typ the driver cannot read, past the backend's INSERT
	// rules (the statements drop them first, as on a database written
	// before them), and for each row its key and the column its
	// driver.Job.Unreadable must name. Without it the Unreadable tests
	// are skipped.
	Unreadable func(typ string) (stmts []string, rows []UnreadableRow)
	// CatalogVersion is the migration that creates the ownership catalog:
	// the upgrade tests bring an unmigrated database to the version before
	// it with the SQL of MigrationSQL, fill it, then migrate up.
	CatalogVersion int
}

// UnreadableRow is a row Harness.Unreadable stores: its key and the
// column the driver cannot read.
type UnreadableRow struct {
	Key, Column string
}

// Short leases keep the suite fast; margins absorb scheduling noise.
const (
	shortLease = 300 * time.Millisecond
	longLease  = time.Minute
	waitFor    = 5 * time.Second
)

// Run runs the conformance suite. newHarness is called once per subtest.
func Run(t *testing.T, newHarness func(t *testing.T) *Harness) {
	s := &suite{newHarness: newHarness}
	groups := []struct {
		name  string
		tests []test
	}{
		{"Insert", s.insertTests()},
		{"Claim", s.claimTests()},
		{"Ordered", s.orderedTests()},
		{"Settle", s.settleTests()},
		{"Elector", s.electorTests()},
		{"Listen", s.listenTests()},
		{"Inbox", s.inboxTests()},
		{"InboxQueue", s.inboxQueueTests()},
		{"Offset", s.offsetTests()},
		{"Purge", s.purgeTests()},
		{"Operator", s.operatorTests()},
		{"Migrate", s.migrateTests()},
		{"Catalog", s.catalogTests()},
		{"Routes", s.routeTests()},
		{"RoutePause", s.routePauseTests()},
		{"AtMostOnce", append(s.atMostOnceTests(), s.atMostOnceQuietTests()...)},
		{"Unreadable", s.unreadableTests()},
		{"Scheduled", s.scheduledTests()},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, tc := range g.tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					h := newHarness(t)
					if h == nil || h.Driver == nil {
						t.Fatal("drivertest: harness without a driver")
					}
					tc.fn(t, h)
				})
			}
		})
	}
}

type suite struct {
	newHarness func(t *testing.T) *Harness
}

type test struct {
	name string
	fn   func(t *testing.T, h *Harness)
}

// ---- helpers -------------------------------------------------------------

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newID(t *testing.T) [16]byte {
	id, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func row(t *testing.T, typ, key string) driver.InsertRow {
	return driver.InsertRow{MessageID: newID(t), Type: typ, Key: key, Payload: []byte(`{"k":"` + key + `"}`)}
}

// testApp owns, in the catalog, every type the suite inserts without
// registering it first: the suite's rows must be of owned types, as
// every enqueue's are.
const testApp = "drivertest"

// register records resources as app's, failing the test on an error.
func register(t *testing.T, d driver.Driver, app string, rs ...driver.Resource) driver.RegisterResult {
	t.Helper()
	res, err := d.Register(ctxOf(t), driver.RegisterParams{App: app, Resources: rs})
	if err != nil {
		t.Fatalf("Register(%s, %+v): %v", app, rs, err)
	}
	return res
}

// own makes sure the types have an owner, testApp unless one is recorded.
func own(t *testing.T, d driver.Driver, types ...string) {
	t.Helper()
	owners, err := d.Owners(ctxOf(t), "")
	if err != nil {
		t.Fatalf("Owners: %v", err)
	}
	var missing []driver.Resource
	for _, typ := range types {
		if !slices.ContainsFunc(owners, func(o driver.Ownership) bool { return o.Kind == driver.ResourceType && o.Name == typ }) &&
			!slices.ContainsFunc(missing, func(r driver.Resource) bool { return r.Name == typ }) {
			missing = append(missing, driver.Resource{Kind: driver.ResourceType, Name: typ})
		}
	}
	if len(missing) > 0 {
		register(t, d, testApp, missing...)
	}
}

func ownRows(t *testing.T, d driver.Driver, rows []driver.InsertRow) {
	t.Helper()
	types := make([]string, len(rows))
	for i, r := range rows {
		types[i] = r.Type
	}
	own(t, d, types...)
}

func insert(t *testing.T, d driver.Driver, rows ...driver.InsertRow) {
	t.Helper()
	ownRows(t, d, rows)
	if err := d.Insert(ctxOf(t), driver.InsertParams{Rows: rows}); err != nil {
		t.Fatalf("Insert: %v", err)
	}
}

// insertOne inserts one row and returns its id.
func insertOne(t *testing.T, d driver.Driver, typ, key string) int64 {
	t.Helper()
	r := row(t, typ, key)
	insert(t, d, r)
	return byMessageID(t, d, r.MessageID).ID
}

func list(t *testing.T, d driver.Driver, f driver.ListFilter) []driver.Job {
	t.Helper()
	if f.Limit == 0 {
		f.Limit = 1000
	}
	jobs, err := d.ListMessages(ctxOf(t), f)
	if err != nil {
		t.Fatalf("ListMessages(%+v): %v", f, err)
	}
	return jobs
}

func byMessageID(t *testing.T, d driver.Driver, id [16]byte) driver.Job {
	t.Helper()
	for _, j := range list(t, d, driver.ListFilter{}) {
		if j.MessageID == id {
			return j
		}
	}
	t.Fatalf("message %s not found", uuid.UUID(id))
	return driver.Job{}
}

func byID(t *testing.T, d driver.Driver, id int64) (driver.Job, bool) {
	t.Helper()
	jobs := list(t, d, driver.ListFilter{IDs: []int64{id}})
	if len(jobs) == 0 {
		return driver.Job{}, false
	}
	return jobs[0], true
}

type claimer struct {
	types, ordered []string
	limit          int
	lease          time.Duration
	fence          *driver.Fence
}

func claimWith(t *testing.T, d driver.Driver, c claimer) ([]driver.Job, int64) {
	t.Helper()
	if c.limit == 0 {
		c.limit = 100
	}
	if c.lease == 0 {
		c.lease = longLease
	}
	token := rand.Int64()
	jobs, err := d.Claim(ctxOf(t), driver.ClaimParams{Types: c.types, OrderedTypes: c.ordered, Limit: c.limit, Lease: c.lease, Token: token, Fence: c.fence})
	if err != nil {
		t.Fatalf("Claim(%v): %v", c.types, err)
	}
	return jobs, token
}

func claim(t *testing.T, d driver.Driver, types ...string) ([]driver.Job, int64) {
	t.Helper()
	return claimWith(t, d, claimer{types: types})
}

// settle returns how many rows took their outcome; settleResult has the
// whole sorting.
func settle(t *testing.T, d driver.Driver, p driver.SettleParams) int {
	t.Helper()
	return len(settleResult(t, d, p).Settled)
}

func settleResult(t *testing.T, d driver.Driver, p driver.SettleParams) driver.SettleResult {
	t.Helper()
	res, err := d.Settle(ctxOf(t), p)
	if err != nil {
		t.Fatalf("Settle: %v", err)
	}
	return res
}

func ids(jobs []driver.Job) []int64 {
	out := make([]int64, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	slices.Sort(out)
	return out
}

func wantIDs(t *testing.T, what string, got []driver.Job, want ...int64) {
	t.Helper()
	slices.Sort(want)
	if g := ids(got); !slices.Equal(g, want) {
		t.Fatalf("%s: got ids %v, want %v", what, g, want)
	}
}

// early reports whether less than d has passed since start. A "not yet"
// can only be asserted then: on a slow machine the moment may have passed
// before the check ran, and the check is inconclusive rather than failed.
func early(start time.Time, d time.Duration) bool { return time.Since(start) < d }

// eventually polls fn until it reports true or waitFor passes.
func eventually(t *testing.T, what string, fn func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !fn() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, waitFor)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// claimEventually polls Claim until it returns something; it checks that
// the wait lasted at least min, so a delay or lease was really honoured.
func claimEventually(t *testing.T, d driver.Driver, c claimer, since time.Time, minWait time.Duration) ([]driver.Job, int64) {
	t.Helper()
	var jobs []driver.Job
	var token int64
	eventually(t, fmt.Sprintf("claim of %v", c.types), func() bool {
		jobs, token = claimWith(t, d, c)
		return len(jobs) > 0
	})
	// A millisecond of clock rounding is allowed for.
	if el := time.Since(since); el < minWait-5*time.Millisecond {
		t.Fatalf("claimed after %s, before the %s it had to wait", el, minWait)
	}
	return jobs, token
}

// claimNotYet checks that c claims nothing until minWait has passed since
// start, then waits until it does. When the first try already claimed, it
// is a failure only if it came too early; otherwise the machine was slow,
// and that claim is the result.
func claimNotYet(t *testing.T, d driver.Driver, c claimer, start time.Time, minWait time.Duration, what string) ([]driver.Job, int64) {
	t.Helper()
	jobs, tok := claimWith(t, d, c)
	if len(jobs) > 0 {
		if early(start, minWait) {
			t.Fatalf("%s: claimed %v before %s had passed", what, ids(jobs), minWait)
		}
		return jobs, tok
	}
	return claimEventually(t, d, c, start, minWait)
}

func headerMap(t *testing.T, b []byte) map[string]string {
	t.Helper()
	m := map[string]string{}
	if len(b) == 0 || string(b) == "null" {
		return m
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("headers %q are not a JSON object of strings: %v", b, err)
	}
	return m
}

func jsonEqual(t *testing.T, got, want []byte) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("payload %q is not JSON: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}

func near(t *testing.T, what string, got time.Time) {
	t.Helper()
	if d := time.Since(got); d > time.Minute || d < -time.Minute {
		t.Fatalf("%s = %s, not near now (%s): is it the database clock in UTC?", what, got, time.Now())
	}
}

func stats(t *testing.T, d driver.Driver, typ string) driver.TypeStats {
	t.Helper()
	all, err := d.Stats(ctxOf(t))
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	for _, s := range all {
		if s.Type == typ {
			return s
		}
	}
	return driver.TypeStats{Type: typ}
}

func inTx(t *testing.T, d driver.Driver, fn func(ctx context.Context, tx driver.Tx) error) error {
	t.Helper()
	return d.InTx(ctxOf(t), fn)
}

func record(t *testing.T, d driver.Driver, r driver.InboxRecord) driver.InboxResult {
	t.Helper()
	var res driver.InboxResult
	err := inTx(t, d, func(ctx context.Context, tx driver.Tx) error {
		var err error
		res, err = tx.InboxRecord(ctx, r)
		return err
	})
	if err != nil {
		t.Fatalf("InboxRecord: %v", err)
	}
	return res
}

func reopen(t *testing.T, h *Harness) driver.Driver {
	t.Helper()
	if h.Reopen == nil {
		t.Fatal("drivertest: harness has no Reopen")
	}
	return h.Reopen(t)
}

var errEffect = errors.New("drivertest: effect failed")
