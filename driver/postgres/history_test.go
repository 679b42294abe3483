package postgres

import (
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
)

// The chart's counts: the minutes of the window only, of the types asked
// for only, in type and minute order.
func TestDeliveredPerMinute(t *testing.T) {
	ctx, pool, d := migratedDriver(t)
	if got, err := d.DeliveredPerMinute(ctx, nil, time.Hour); err != nil || got != nil {
		t.Fatalf("no types: %v %v", got, err)
	}
	// a: 3 minutes in the window and one two hours back; b: one; c: not
	// asked for.
	if _, err := pool.Exec(ctx, `INSERT INTO `+d.table("delivered_counts")+` (type, minute, n) VALUES
		('a', date_trunc('minute', now()), 5), ('a', date_trunc('minute', now()) - interval '1 minute', 4),
		('a', date_trunc('minute', now()) - interval '30 minutes', 3), ('a', date_trunc('minute', now()) - interval '2 hours', 99),
		('b', date_trunc('minute', now()) - interval '59 minutes', 7), ('c', date_trunc('minute', now()), 11)`); err != nil {
		t.Fatal(err)
	}
	got, err := d.DeliveredPerMinute(ctx, []string{"b", "a", "none"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var ns []int64
	for i, m := range got {
		ns = append(ns, m.N)
		if i > 0 && (got[i-1].Type > m.Type || got[i-1].Type == m.Type && !got[i-1].Minute.Before(m.Minute)) {
			t.Fatalf("not in type, minute order: %+v", got)
		}
	}
	if len(got) != 4 || got[0].Type != "a" || got[3].Type != "b" || ns[0]+ns[1]+ns[2] != 12 || ns[3] != 7 {
		t.Fatalf("got %+v", got)
	}
}

// The chart reads one primary-key range per type, never the whole day of
// counts the table keeps: flattened into a join, the planner hashes it.
func TestDeliveredPerMinutePlanReadsOneRangePerType(t *testing.T) {
	ctx, pool, d := migratedDriver(t)
	var types []string
	for i := range 50 {
		types = append(types, "type-"+string(rune('A'+i/26))+string(rune('a'+i%26)))
	}
	q, err := d.Statement("delivered_minutes")
	if err != nil {
		t.Fatal(err)
	}
	check := func(state string) {
		t.Helper()
		if bad := badScans(planScans(t, pool, q, types, time.Hour), "delivered_counts", "delivered_counts_pkey"); len(bad) > 0 {
			t.Fatalf("%s: the chart's statement scans %v", state, bad)
		}
	}
	check("empty")
	if _, err := pool.Exec(ctx, `INSERT INTO `+d.table("delivered_counts")+` (type, minute, n)
		SELECT t, date_trunc('minute', now()) - m * interval '1 minute', 1 FROM unnest($1::text[]) t, generate_series(0, 1439) m`, types); err != nil {
		t.Fatal(err)
	}
	check("a day of 50 types, never analyzed")
	if _, err := pool.Exec(ctx, "ANALYZE "+d.table("delivered_counts")); err != nil {
		t.Fatal(err)
	}
	check("a day of 50 types, analyzed")
}

// Settles append their counts and never update a row: a row that every
// settle updates is a chain of versions that a pinned xmin horizon keeps,
// and every later settle walks it (migration 011). The purge folds the
// log into one row per type and minute.
func TestSettlesAppendTheirCountsAndThePurgeFoldsThem(t *testing.T) {
	ctx, pool, d := migratedDriver(t)
	count := func(table string) (rows, sum int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, "SELECT count(*), coalesce(sum(n), 0) FROM "+d.table(table)).Scan(&rows, &sum); err != nil {
			t.Fatal(err)
		}
		return rows, sum
	}
	if _, err := d.Register(ctx, driver.RegisterParams{App: "a", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "appended"}}}); err != nil {
		t.Fatal(err)
	}
	var settles int64
	for _, k := range []string{"1", "2", "3"} {
		var id int64
		if err := pool.QueryRow(ctx, "INSERT INTO "+d.table("outbox")+" (type, key) VALUES ('appended', $1) RETURNING id", k).Scan(&id); err != nil {
			t.Fatal(err)
		}
		jobs, err := d.Claim(ctx, driver.ClaimParams{Types: []string{"appended"}, Limit: 10, Lease: time.Minute, Token: 7})
		if err != nil || len(jobs) != 1 || jobs[0].ID != id {
			t.Fatalf("claim = %+v, %v", jobs, err)
		}
		res, err := d.Settle(ctx, driver.SettleParams{Token: 7, Delivered: []int64{id}})
		if err != nil || len(res.Settled) != 1 {
			t.Fatalf("settle = %+v, %v", res, err)
		}
		settles++
		// Two settles in one minute must not have touched one row: the
		// upserted table stays empty until the purge.
		if rows, _ := count("delivered_counts"); rows != 0 {
			t.Fatalf("after settle %d delivered_counts has %d rows: a settle wrote it", settles, rows)
		}
		if rows, sum := count("delivered_counts_log"); rows != settles || sum != settles {
			t.Fatalf("after settle %d the log has %d rows adding up to %d", settles, rows, sum)
		}
	}
	if _, err := d.Purge(ctx, driver.PurgeParams{Types: []string{"appended"}}); err != nil {
		t.Fatal(err)
	}
	if rows, _ := count("delivered_counts_log"); rows != 0 {
		t.Fatalf("the purge left %d rows in the log", rows)
	}
	if rows, sum := count("delivered_counts"); rows < 1 || rows > 2 || sum != 3 {
		// Two rows only if the settles straddled a minute.
		t.Fatalf("after the purge delivered_counts has %d rows adding up to %d, want one a minute adding up to 3", rows, sum)
	}
}
