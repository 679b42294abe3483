package sqlite

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xadm/mensageria/driver"
)

// The relay's statements keep to their indexes, whatever the outbox
// holds: the claim walks each type's range of outbox_claim (and, for an
// ordered type, looks a key's head up on outbox_key), the settles and the
// mark find their rows by the primary key, the idle relay's next-due read
// walks each type's range of outbox_claim from the statement's own clock,
// and none of them reads the whole outbox. Pinned on an empty outbox, as the planner first sees one,
// and again after ANALYZE of an outbox whose rows are mostly other types'
// and delivered ones kept, where a scan could look cheap.
func TestRelayStatementsKeepToTheirIndexes(t *testing.T) {
	d, err := Open(filepath.Join(t.TempDir(), "plan.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	if _, err := d.Migrate(t.Context(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	p := d.prefix
	const now, token = int64(1_000_000), int64(7)
	ids := `[1, 2, 3, 4, 5]`
	cases := []struct {
		name  string
		query string
		args  []any
		index string // a step of the plan reads this (covering or not)
	}{
		{"claim", d.q.claim, []any{now, token, now + 1, `{"a": false, "b": true}`, 100}, "USING INDEX " + p + "outbox_claim (type=? AND available_at<?)"},
		{"claim, ordered", d.q.claim, []any{now, token, now + 1, `{"b": true}`, 100}, "INDEX " + p + "outbox_key (type=? AND key=? AND id<?)"},
		{"claim_in_doubt", d.q.claimInDoubt, []any{now, token, now + 1, `["a", "b"]`, 100, now}, "USING INDEX " + p + "outbox_claim (type=? AND available_at<?)"},
		{"mark", d.q.mark, []any{now, ids, token}, "USING INTEGER PRIMARY KEY (rowid=?)"},
		{"settle_delivered", d.q.settleDelivered, []any{ids, token, now}, "USING INTEGER PRIMARY KEY (rowid=?)"},
		{"settle_delivered_kept", d.q.settleDeliveredKept, []any{ids, token, now}, "USING INTEGER PRIMARY KEY (rowid=?)"},
		{"settle_release", d.q.settleRelease, []any{ids, token, now}, "USING INTEGER PRIMARY KEY (rowid=?)"},
		{"settle_retry", d.q.settleRetry, []any{1, token, now, now, 0, "e", "r"}, "USING INTEGER PRIMARY KEY (rowid=?)"},
		{"settle_dead", d.q.settleDead, []any{1, token, now, "e", "r"}, "USING INTEGER PRIMARY KEY (rowid=?)"},
		{"settle_in_doubt", d.q.settleInDoubt, []any{1, token, now, now, "e", "r"}, "USING INTEGER PRIMARY KEY (rowid=?)"},
		{"settle_sort", d.q.settleSort, []any{ids, token, now}, "USING INTEGER PRIMARY KEY (rowid=?)"},
		{"next_due", d.q.nextDue, []any{`["a", "b"]`}, "USING INDEX " + p + "outbox_claim (type=? AND available_at>?)"},
		{"purge_outbox", d.q.purgeOutbox, []any{`["a", "b"]`, now, 100}, "INDEX " + p + "outbox_delivered (type=? AND delivered_at<?)"},
	}
	check := func(phase string) {
		t.Helper()
		for _, c := range cases {
			plan := queryPlan(t, d, c.query, c.args...)
			if !strings.Contains(strings.Join(plan, "\n"), c.index) {
				t.Errorf("%s, %s: no step of the plan reads %q:\n%s", phase, c.name, c.index, strings.Join(plan, "\n"))
			}
			for _, step := range plan {
				if fullScan(step) {
					t.Errorf("%s, %s: reads the whole outbox (%s):\n%s", phase, c.name, step, strings.Join(plan, "\n"))
				}
			}
		}
	}
	check("empty outbox")

	// 20,000 rows: other types' pending rows, delivered rows kept, dead
	// rows, and a few of the claimed types'.
	types := []driver.Resource{{Kind: driver.ResourceType, Name: "a"}, {Kind: driver.ResourceType, Name: "b"}}
	for i := range 7 {
		types = append(types, driver.Resource{Kind: driver.ResourceType, Name: fmt.Sprintf("other%d", i)})
	}
	if _, err := d.Register(t.Context(), driver.RegisterParams{App: "plan", Resources: types}); err != nil {
		t.Fatal(err)
	}
	_, err = d.db.ExecContext(t.Context(), `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 20000)
		INSERT INTO `+p+`outbox (message_id, type, key, payload, state, delivered_at, available_at, created_at)
		SELECT printf('00000000-0000-4000-8000-%012d', n),
		       CASE WHEN n % 100 = 0 THEN 'a' WHEN n % 100 = 1 THEN 'b' ELSE 'other' || (n % 7) END,
		       'k' || (n % 50), '{}',
		       CASE WHEN n % 3 = 0 THEN 'delivered' WHEN n % 11 = 0 THEN 'dead' ELSE 'pending' END,
		       CASE WHEN n % 3 = 0 THEN n END, n, n
		  FROM g`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.db.ExecContext(t.Context(), "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	check("analyzed outbox")
}

// queryPlan is SQLite's EXPLAIN QUERY PLAN of query, one step a line.
func queryPlan(t *testing.T, d *Driver, query string, args ...any) []string {
	t.Helper()
	rows, err := d.db.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("EXPLAIN QUERY PLAN %s: %v", query, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// fullScan reports whether a plan step walks a whole table (or a whole
// index): SQLite says SCAN for that, SEARCH for a lookup or a range. None
// of the statements pinned here reads any table but the outbox, so any
// such step is a walk of the outbox, under whichever alias.
func fullScan(step string) bool {
	f := strings.Fields(step)
	if len(f) < 2 || f[0] != "SCAN" {
		return false
	}
	// json_each is a virtual table, the list the statement was given; a
	// subquery's result is no table of the driver's.
	return !strings.Contains(step, "VIRTUAL TABLE") && !strings.HasPrefix(f[1], "(")
}
