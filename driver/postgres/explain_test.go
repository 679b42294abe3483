package postgres

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testdb"
)

// The claim must walk its own types' part of the claim index in every state
// the table goes through: empty, full of other apps' rows, unanalyzed,
// analyzed, drained. A plan that scans the table or another index here is
// the stale-plan and type-filter trap of docs/adr/0004-claim-query.md.
func TestClaimPlanUsesTheClaimIndexInEveryState(t *testing.T) {
	ctx := context.Background()
	pool := testdb.Pool(t)
	d, err := New(pool, &Config{Schema: testdb.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	explain := func(state string) {
		t.Helper()
		var plan string
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
				return err
			}
			// The same statement and parameters the driver sends.
			return tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+d.q.claim,
				[]string{"mine"}, 100, int64(1), 30*time.Second, []bool{false}, "", int64(0)).Scan(&plan)
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
