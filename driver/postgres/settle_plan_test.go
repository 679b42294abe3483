package postgres

import "testing"

// Every statement that changes rows the relay names by id finds them by
// the primary key, even when the statistics make the primary key look
// dear. With the xmin horizon pinned the outbox holds few live rows and
// indexes full of entries that cannot go: the planner then prices each
// key lookup at many index pages (the key's estimate of its entries is
// the table's live rows), and prices the claim index, a partial index
// whose own count includes every entry it keeps, as cheap. Seen in the
// stress scenario's pinned phase: the settle's DELETE read the whole
// claim index through a bitmap for five ids, 2 to 13 ms a call. The
// statements spell their state test so that no partial index on state
// can serve them (queries/settle_delivered.sql).
func TestRowsNamedByIDAreFoundByThePrimaryKey(t *testing.T) {
	ctx, pool, d := migratedDriver(t)
	exec := execer(t, ctx, pool)
	own(t, d, "settle-plan", "t")
	// Many rows the claim index does not hold (delivered, kept), so the
	// primary key is large and the claim index small; then the
	// statistics of a table whose live rows are few.
	exec("INSERT INTO " + d.table("outbox") + " (type, key, state, delivered_at) SELECT 't', 'k' || g, 'delivered', now() FROM generate_series(1, 60000) g")
	exec("INSERT INTO " + d.table("outbox") + " (type, key) SELECT 't', 'p' || g FROM generate_series(1, 20) g")
	exec("ANALYZE " + d.table("outbox"))
	exec("UPDATE pg_catalog.pg_class SET reltuples = 3 WHERE oid = '" + d.table("outbox") + "'::regclass")
	ids := []int64{60001, 60002, 60003, 60004, 60005}
	cases := []struct {
		name string
		args []any
	}{
		{"settle_delivered", []any{ids, int64(1), false}},
		{"settle_delivered", []any{ids, int64(1), true}},
		{"settle_release", []any{ids, int64(1)}},
		{"mark", []any{ids, int64(1)}},
		{"settle_dead", []any{ids, int64(1), []string{"e", "e", "e", "e", "e"}, []string{"", "", "", "", ""}}},
		{"settle_retry", []any{ids, int64(1), []int64{1, 1, 1, 1, 1}, []string{"e", "e", "e", "e", "e"}, []string{"", "", "", "", ""}, []bool{false, false, false, false, false}}},
		{"settle_in_doubt", []any{ids, int64(1), []string{"e", "e", "e", "e", "e"}, []string{"", "", "", "", ""}, []int64{1, 1, 1, 1, 1}}},
		{"resolve", []any{ids, "delivered", "op", "checked", false}},
	}
	for _, c := range cases {
		q, err := d.Statement(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if bad := badScans(planScans(t, pool, q, c.args...), "outbox", "outbox_pkey"); len(bad) > 0 {
			t.Errorf("%s %v: finds its rows with %v, not the primary key", c.name, c.args[len(c.args)-1], bad)
		}
	}
}
