package postgres

import (
	"testing"
	"time"
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
