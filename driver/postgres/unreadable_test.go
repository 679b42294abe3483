package postgres_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/xadm/mensageria/driver"
)

// A plain INSERT of a time the relay cannot read, or no transport carry,
// is refused with SQLSTATE 23514 and a constraint that names the column;
// message_id is uuid-typed, so a 36-character id that is no UUID is
// refused by its type (22P02). Nothing is stored.
func TestOutboxRefusesUnreadableTimesAtInsert(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "ok")
	cases := []struct {
		what, columns, values, state, constraint string
	}{
		{"created_at infinity", "created_at", "'infinity'", "23514", "outbox_created_at_readable"},
		{"created_at -infinity", "created_at", "'-infinity'", "23514", "outbox_created_at_readable"},
		{"created_at in year 10000", "created_at", "'10000-01-01 00:00:00+00'", "23514", "outbox_created_at_readable"},
		{"created_at at Go's zero time", "created_at", "'0001-01-01 00:00:00+00'", "23514", "outbox_created_at_readable"},
		{"created_at before Christ", "created_at", "'4713-01-01 00:00:00+00 BC'", "23514", "outbox_created_at_readable"},
		{"available_at infinity", "available_at", "'infinity'", "23514", "outbox_available_at_readable"},
		{"available_at -infinity", "available_at", "'-infinity'", "23514", "outbox_available_at_readable"},
		{"lease_until infinity", "lease_token, lease_until", "1, 'infinity'", "23514", "outbox_lease_until_readable"},
		{"attempted_at -infinity", "attempted_at", "'-infinity'", "23514", "outbox_attempted_at_readable"},
		{"a message_id that is no UUID", "message_id", "'order-0001-created-by-java-app-00001'", "22P02", ""},
	}
	for _, c := range cases {
		_, err := e.pool.Exec(e.ctx, "INSERT INTO "+e.table("outbox")+" (type, key, "+c.columns+") VALUES ('ok', 'k', "+c.values+")")
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != c.state || pe.ConstraintName != c.constraint {
			t.Errorf("%s: err = %v, want SQLSTATE %s from constraint %q", c.what, err, c.state, c.constraint)
		}
	}
	if n := e.count("true"); n != 0 {
		t.Fatalf("%d rows stored, want none", n)
	}
	// The edges that are readable pass.
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key, created_at, available_at) VALUES " +
		"('ok', 'first', '0001-01-01 00:00:00.000001+00', '9999-12-31 23:59:59.999999+00'), ('ok', 'now', now(), now())")
	if n := e.count("true"); n != 2 {
		t.Fatalf("%d rows stored, want the 2 readable ones", n)
	}
}

// An upgrade with pending rows that break migration 12's constraints does
// not fail: those rows are parked dead with a reason naming the column,
// every other row is left as it was, and a dead row keeps what it holds
// (the constraints are NOT VALID, and hold pending rows only).
func TestUpgradeParksRowsWithUnreadableTimes(t *testing.T) {
	e := newCatalogEnv(t, false)
	ms, err := e.d.MigrationSQL(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Version < 12 {
			e.exec(m.SQL)
		}
	}
	e.own("a", "t")
	e.exec("INSERT INTO " + e.table("outbox") + ` (type, key, created_at, available_at, attempted_at, state) VALUES
		('t', 'good', now(), now(), NULL, 'pending'),
		('t', 'created-inf', 'infinity', now(), NULL, 'pending'),
		('t', 'both', '-infinity', '-infinity', NULL, 'pending'),
		('t', 'far', '20000-01-01 00:00:00+00', now(), NULL, 'pending'),
		('t', 'marked', now(), now(), 'infinity', 'pending'),
		('t', 'dead-inf', 'infinity', now(), NULL, 'dead')`)
	res, err := e.d.Migrate(e.ctx, driver.MigrateParams{Mode: driver.MigrateUp})
	if err != nil || !slices.Contains(res.Applied, 12) {
		t.Fatalf("upgrade = %+v, %v; want migration 12 applied", res, err)
	}
	jobs, err := e.d.ListMessages(e.ctx, driver.ListFilter{Limit: 100})
	if err != nil {
		t.Fatalf("ListMessages over unreadable rows: %v", err)
	}
	want := map[string][]string{
		"good":        nil,
		"created-inf": {"unreadable row: created_at is infinity", "migration 12"},
		"both":        {"created_at is -infinity", "available_at is -infinity"},
		"far":         {"created_at is out of range (20000-01-01"},
		"marked":      {"attempted_at is infinity"},
	}
	for _, j := range jobs {
		says, ok := want[j.Key]
		if !ok {
			continue
		}
		if says == nil {
			if j.State != driver.StatePending || j.Unreadable != "" {
				t.Errorf("row %s = %s (%q), want pending and readable", j.Key, j.State, j.Unreadable)
			}
			continue
		}
		if j.State != driver.StateDead {
			t.Errorf("row %s is %s, want dead", j.Key, j.State)
		}
		for _, s := range says {
			if !strings.Contains(j.LastError, s) {
				t.Errorf("row %s: reason %q does not say %q", j.Key, j.LastError, s)
			}
		}
	}
	if n := e.count("key = 'dead-inf' AND last_error IS NULL AND NOT isfinite(created_at)"); n != 1 {
		t.Fatal("the dead row with an infinite time was changed by the upgrade")
	}
	if _, err := e.d.Stats(e.ctx); err != nil {
		t.Fatalf("Stats after the upgrade: %v", err)
	}
	// Retrying a parked row without fixing it is refused by the
	// constraint, which names the column.
	_, err = e.d.Revive(e.ctx, driver.ReviveParams{Types: []string{"t"}})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "23514" || !strings.Contains(pe.ConstraintName, "_readable") {
		t.Fatalf("dead retry of unreadable rows = %v, want SQLSTATE 23514 naming a column's constraint", err)
	}
}

// A row whose times cannot be read (here with migration 12's constraints
// dropped, as a schema restored without them would be) is claimed with the
// rest of its batch, each row read apart: it comes back unreadable, naming
// the column, and parks dead under the claim's token; the good rows are
// claimed and delivered as ever. Stats, status's source, count it. Before,
// its scan failed the whole claim, every time, and stats with SQLSTATE
// 22008.
func TestClaimReadsEachRowApart(t *testing.T) {
	e := newCatalogEnv(t, true)
	e.own("a", "t")
	for _, c := range []string{"created_at", "available_at", "lease_until", "attempted_at"} {
		e.exec("ALTER TABLE " + e.table("outbox") + " DROP CONSTRAINT outbox_" + c + "_readable")
	}
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key) VALUES ('t', 'good-1')")
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key, created_at) VALUES ('t', 'created-minus', '-infinity'), ('t', 'created-plus', 'infinity')")
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key, available_at) VALUES ('t', 'available-minus', '-infinity')")
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key, attempts) VALUES ('t', 'attempts-max', 2147483647)")
	e.exec("INSERT INTO " + e.table("outbox") + " (type, key) VALUES ('t', 'good-2')")
	if _, err := e.d.Stats(e.ctx); err != nil {
		t.Fatalf("Stats with infinite times pending: %v", err)
	}
	const token = 7
	jobs, err := e.d.Claim(e.ctx, driver.ClaimParams{Types: []string{"t"}, Limit: 10, Lease: time.Minute, Token: token})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	want := map[string]string{
		"good-1": "", "good-2": "", "attempts-max": "",
		"created-minus": "created_at is -infinity", "created-plus": "created_at is infinity",
		"available-minus": "available_at is -infinity",
	}
	if len(jobs) != len(want) {
		t.Fatalf("claimed %d rows, want %d: %+v", len(jobs), len(want), jobs)
	}
	p := driver.SettleParams{Token: token}
	for _, j := range jobs {
		if j.Unreadable != want[j.Key] {
			t.Errorf("row %s: Unreadable %q, want %q", j.Key, j.Unreadable, want[j.Key])
		}
		if j.Unreadable != "" {
			p.Dead = append(p.Dead, driver.Failure{ID: j.ID, Error: "unreadable row: " + j.Unreadable})
		} else {
			p.Delivered = append(p.Delivered, j.ID)
		}
		if j.Key == "attempts-max" && j.Attempt != 1000000001 {
			t.Errorf("row with attempts 2147483647 claimed as attempt %d, want it counted from 1,000,000,000", j.Attempt)
		}
	}
	// Parking is fenced like every settle: another token changes nothing.
	if res, err := e.d.Settle(e.ctx, driver.SettleParams{Token: token + 1, Dead: p.Dead}); err != nil || len(res.Settled) != 0 {
		t.Fatalf("settle under another token = %+v, %v; want nothing settled", res, err)
	}
	res, err := e.d.Settle(e.ctx, p)
	if err != nil || len(res.Settled) != len(jobs) {
		t.Fatalf("Settle = %+v, %v; want all %d settled", res, err, len(jobs))
	}
	if n := e.count("state = 'dead' AND last_error LIKE 'unreadable row: %infinity'"); n != 3 {
		t.Fatalf("%d rows parked with their reason, want 3", n)
	}
	stats, err := e.d.Stats(e.ctx)
	if err != nil || len(stats) != 1 || stats[0].Dead != 3 || stats[0].Pending != 0 {
		t.Fatalf("Stats = %+v, %v; want 3 dead and nothing pending", stats, err)
	}
}
