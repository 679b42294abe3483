package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/xadm/mensageria/driver"
)

// The claim must walk its own types' part of the claim index in every state
// the table goes through: empty, full of other apps' rows, unanalyzed,
// analyzed, drained. A plan that scans the table or another index here is
// the stale-plan and type-filter trap of docs/adr/0004-claim-query.md.
func TestClaimPlanUsesTheClaimIndexInEveryState(t *testing.T) {
	ctx, pool, d := migratedDriver(t)
	exec := execer(t, ctx, pool)
	var explainFrom func(state string, floor pgtype.Timestamptz)
	explain := func(state string) {
		t.Helper()
		// A sweep (no floor) and a claim from a floor (floor.go).
		for _, floor := range []pgtype.Timestamptz{noFloor, {Time: time.Now().Add(-time.Second), Valid: true}} {
			explainFrom(state, floor)
		}
	}
	explainFrom = func(state string, floor pgtype.Timestamptz) {
		t.Helper()
		var plan string
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			for _, set := range []string{"SET LOCAL plan_cache_mode = force_custom_plan", "SET LOCAL enable_bitmapscan = off"} {
				if _, err := tx.Exec(ctx, set); err != nil {
					return err
				}
			}
			// The same statement and parameters the driver sends.
			return tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+d.q.claim,
				[]string{"mine"}, 100, int64(1), 30*time.Second, []bool{false}, "", int64(0),
				[]pgtype.Timestamptz{floor}, []int64{0}).Scan(&plan)
		})
		if err != nil {
			t.Fatalf("%s: explain: %v", state, err)
		}
		var tree []map[string]any
		if err := json.Unmarshal([]byte(plan), &tree); err != nil {
			t.Fatal(err)
		}
		var scans []string
		walk(tree[0]["Plan"], func(node map[string]any) {
			if rel, _ := node["Relation Name"].(string); rel == "outbox" {
				scans = append(scans, node["Node Type"].(string)+" "+str(node["Index Name"]))
			}
		})
		claimScans := 0
		for _, s := range scans {
			if strings.Contains(s, "Seq Scan") || strings.Contains(s, "Bitmap") {
				t.Errorf("%s: the claim scans the outbox with %q; plan:\n%s", state, s, plan)
			}
			if strings.Contains(s, "outbox_claim_idx") {
				claimScans++
			}
		}
		if claimScans != 1 {
			t.Errorf("%s: want one scan of outbox_claim_idx, got scans %v", state, scans)
		}
		// The walk starts at the floor, and LIMIT stops it: no sort.
		if !strings.Contains(plan, `ROW(available_at, id) >= ROW(t.floor_at, t.floor_id)`) || strings.Contains(plan, `"Sort Key": ["o.available_at"`) {
			t.Errorf("%s, floor %v: the floor is not where the index scan starts, or the scan is sorted; plan:\n%s", state, floor, plan)
		}
	}
	own(t, d, "claim-test", "mine", "theirs.0", "theirs.1", "theirs.2", "theirs.3", "theirs.4")
	explain("empty")
	exec("INSERT INTO " + d.table("outbox") + " (type, key) SELECT 'theirs.' || (g % 5), 'k' || g FROM generate_series(1, 50000) g")
	exec("INSERT INTO " + d.table("outbox") + " (type, key) SELECT 'mine', 'k' || g FROM generate_series(1, 2000) g")
	explain("full, never analyzed")
	exec("ANALYZE " + d.table("outbox"))
	explain("full, analyzed")
	exec("DELETE FROM " + d.table("outbox") + " WHERE type = 'mine'")
	explain("drained, stale statistics")
}

func walk(n any, fn func(map[string]any)) {
	m, ok := n.(map[string]any)
	if !ok {
		return
	}
	fn(m)
	if kids, ok := m["Plans"].([]any); ok {
		for _, k := range kids {
			walk(k, fn)
		}
	}
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// own records types as app's in the catalog, as its relay would at start:
// the outbox refuses rows of a type no app owns.
func own(t *testing.T, d *Driver, app string, types ...string) {
	t.Helper()
	rs := make([]driver.Resource, len(types))
	for i, typ := range types {
		rs[i] = driver.Resource{Kind: driver.ResourceType, Name: typ}
	}
	if _, err := d.Register(context.Background(), driver.RegisterParams{App: app, Resources: rs}); err != nil {
		t.Fatalf("register %v as %s's: %v", types, app, err)
	}
}

type scan struct{ node, relation, index string }

func (s scan) String() string { return s.node + " " + s.relation + " " + s.index }

// planScans explains q as the driver sends it (a fresh plan for these
// parameters) and returns every scan of a relation in the plan.
func planScans(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, q string, args ...any) []scan {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
		t.Fatal(err)
	}
	var plan string
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q, args...).Scan(&plan); err != nil {
		t.Fatalf("explain: %v", err)
	}
	var tree []map[string]any
	if err := json.Unmarshal([]byte(plan), &tree); err != nil {
		t.Fatal(err)
	}
	var out []scan
	walk(tree[0]["Plan"], func(node map[string]any) {
		typ, rel, idx := str(node["Node Type"]), str(node["Relation Name"]), str(node["Index Name"])
		// The statement's own target is no scan; a bitmap index scan
		// names its index but not its table.
		if typ != "ModifyTable" && (rel != "" || idx != "") {
			out = append(out, scan{typ, rel, idx})
		}
	})
	return out
}

// badScans lists the scans that read table in a way other than through
// the indexes allowed: a sequential scan, or another index. A bitmap heap
// scan is judged by its index scans.
func badScans(scans []scan, table string, allowed ...string) []scan {
	var bad []scan
	for _, s := range scans {
		switch {
		case s.relation == table && s.node == "Seq Scan":
			bad = append(bad, s)
		case s.index != "" && strings.HasPrefix(s.index, table+"_") && !slices.Contains(allowed, s.index):
			bad = append(bad, s)
		}
	}
	return bad
}

// The per-consumer inbox purge seeks each of the app's consumers on
// (consumer, received_at) and deletes what it found by row address: a scan
// of the whole inbox, or a walk of every consumer's records in time order,
// would grow with the other apps' records.
func TestPurgeInboxPlanSeeksEachConsumer(t *testing.T) {
	ctx, pool, d := migratedDriver(t)
	var rs []driver.Resource
	for i := range 5 {
		rs = append(rs, driver.Resource{Kind: driver.ResourceConsumer, Name: fmt.Sprintf("mine.%d", i), Window: time.Hour})
	}
	if _, err := d.Register(ctx, driver.RegisterParams{App: "a", Resources: rs}); err != nil {
		t.Fatal(err)
	}
	check := func(state string, full bool) {
		t.Helper()
		scans := planScans(t, pool, d.q.purgeInbox, "a", 1000)
		seeks, byAddress := 0, 0
		for _, s := range scans {
			if s.index == "inbox_consumer_received_idx" {
				seeks++
			}
			if s.node == "Tid Scan" {
				byAddress++
			}
		}
		if seeks != 1 {
			t.Errorf("%s: want one seek on inbox_consumer_received_idx, got scans %v", state, scans)
		}
		if !full {
			return // an empty table may be read whole: there is nothing to read
		}
		if bad := badScans(scans, "inbox", "inbox_consumer_received_idx", "inbox_pkey"); len(bad) > 0 || byAddress != 1 {
			t.Errorf("%s: the purge reads the inbox with %v; want the found records deleted by address; scans %v", state, bad, scans)
		}
	}
	check("empty", false)
	exec(t, pool, "INSERT INTO "+d.table("inbox")+" (consumer, key, message_id, received_at) SELECT 'theirs.' || (g % 20), 'k' || g, gen_random_uuid(), now() - g * interval '1 second' FROM generate_series(1, 60000) g")
	exec(t, pool, "INSERT INTO "+d.table("inbox")+" (consumer, key, message_id, received_at) SELECT 'mine.' || (g % 5), 'k' || g, gen_random_uuid(), now() - g * interval '1 second' FROM generate_series(1, 3000) g")
	check("full, never analyzed", true)
	exec(t, pool, "ANALYZE "+d.table("inbox"))
	check("full, analyzed", true)
}

// The delivered rows of one app's types are found by a seek per type, then
// deleted by primary key.
func TestPurgeOutboxPlanSeeksEachType(t *testing.T) {
	_, pool, d := migratedDriver(t)
	own(t, d, "a", "mine.0", "mine.1")
	own(t, d, "b", "theirs.0", "theirs.1", "theirs.2", "theirs.3")
	check := func(state string) {
		t.Helper()
		scans := planScans(t, pool, d.q.purgeOutbox, time.Minute, 1000, []string{"mine.0", "mine.1"})
		if bad := badScans(scans, "outbox", "outbox_delivered_type_idx", "outbox_pkey"); len(bad) > 0 {
			t.Errorf("%s: the purge reads the outbox with %v; scans %v", state, bad, scans)
		}
		if !slices.Contains(scans, scan{"Index Scan", "outbox", "outbox_delivered_type_idx"}) {
			t.Errorf("%s: want the delivered rows found by an ordered seek on outbox_delivered_type_idx; scans %v", state, scans)
		}
	}
	check("empty")
	exec(t, pool, "INSERT INTO "+d.table("outbox")+" (type, key, state, delivered_at) SELECT 'theirs.' || (g % 4), 'k' || g, 'delivered', now() - g * interval '1 second' FROM generate_series(1, 60000) g")
	exec(t, pool, "INSERT INTO "+d.table("outbox")+" (type, key, state, delivered_at) SELECT 'mine.' || (g % 2), 'k' || g, 'delivered', now() - g * interval '1 second' FROM generate_series(1, 3000) g")
	check("full, never analyzed")
	exec(t, pool, "ANALYZE "+d.table("outbox"))
	check("full, analyzed")
}

// Stats reads pending and dead rows through their partial indexes, never
// the delivered rows an app keeps, and looks the owners up once per type
// after counting (not once per row).
func TestStatsPlanReadsThePartialIndexesAndOwnersOnce(t *testing.T) {
	_, pool, d := migratedDriver(t)
	own(t, d, "a", "t.0", "t.1", "t.2", "t.3", "t.4")
	check := func(state string) {
		t.Helper()
		scans := planScans(t, pool, d.q.stats)
		// Either partial index of pending rows will do.
		if bad := badScans(scans, "outbox", "outbox_claim_idx", "outbox_key_idx", "outbox_dead_idx"); len(bad) > 0 {
			t.Errorf("%s: stats read the outbox with %v; scans %v", state, bad, scans)
		}
		owners := 0
		for _, s := range scans {
			if s.relation == "owners" {
				owners++
			}
		}
		if owners != 1 {
			t.Errorf("%s: want the owners read once, got scans %v", state, scans)
		}
	}
	exec(t, pool, "INSERT INTO "+d.table("outbox")+" (type, key, state, delivered_at) SELECT 't.' || (g % 5), 'k' || g, 'delivered', now() FROM generate_series(1, 50000) g")
	exec(t, pool, "INSERT INTO "+d.table("outbox")+" (type, key, state) SELECT 't.' || (g % 5), 'd' || g, 'dead' FROM generate_series(1, 500) g")
	exec(t, pool, "INSERT INTO "+d.table("outbox")+" (type, key) SELECT 't.' || (g % 5), 'p' || g FROM generate_series(1, 2000) g")
	check("kept delivered rows, never analyzed")
	exec(t, pool, "ANALYZE "+d.table("outbox"))
	check("kept delivered rows, analyzed")
}

func exec(t *testing.T, pool interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
}, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
