package postgres

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The reconcile probe's claim reads the partial index of marked rows, never
// the pending rows around them: an outbox with a large backlog and a few
// rows in doubt costs the probe the rows in doubt only. Empty, full and
// analyzed, full and never analyzed.
func TestClaimInDoubtPlanUsesTheDoubtIndex(t *testing.T) {
	ctx, pool, d := migratedDriver(t)
	exec := execer(t, ctx, pool)
	explain := func(state string) {
		t.Helper()
		var plan string
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL plan_cache_mode = force_custom_plan"); err != nil {
				return err
			}
			// The same statement and parameters the driver sends.
			return tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+d.q.claimInDoubt,
				[]string{"mine"}, 100, int64(1), 30*time.Second, "", int64(0), 30*time.Second).Scan(&plan)
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
		for _, s := range scans {
			if strings.Contains(s, "Seq Scan") || (strings.Contains(s, "Index") && !strings.Contains(s, "outbox_doubt_idx") && !strings.Contains(s, "outbox_pkey")) {
				t.Errorf("%s: the probe's claim scans the outbox with %q; plan:\n%s", state, s, plan)
			}
		}
		found := false
		for _, s := range scans {
			found = found || strings.Contains(s, "outbox_doubt_idx")
		}
		if !found {
			t.Errorf("%s: the probe's claim does not read outbox_doubt_idx: scans %v", state, scans)
		}
	}
	own(t, d, "doubt-test", "mine", "theirs")
	explain("empty")
	exec("INSERT INTO " + d.table("outbox") + " (type, key) SELECT 'theirs', 'k' || g FROM generate_series(1, 30000) g")
	exec("INSERT INTO " + d.table("outbox") + " (type, key) SELECT 'mine', 'k' || g FROM generate_series(1, 20000) g")
	exec("UPDATE " + d.table("outbox") + " SET attempted_at = now() WHERE type = 'mine' AND id % 1000 = 0")
	explain("full, never analyzed")
	exec("ANALYZE " + d.table("outbox"))
	explain("full, analyzed")
}
