package sqlite_test

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/xadm/mensageria/driver"
)

// A plain INSERT of what the relay cannot read is refused by migration 7's
// trigger, as SQLITE_CONSTRAINT_TRIGGER with a message naming the column,
// and nothing is stored; the 36-character id that is no UUID
// first.
func TestOutboxRefusesUnreadableRowsAtInsert(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	own(t, d, "a", "ok")
	cases := []struct{ what, columns, values, says string }{
		{"a message_id that is no UUID", "message_id", "'order-0001-created-by-java-app-00001'", "message_id must be a UUID"},
		{"a message_id of 36 hex digits without hyphens", "message_id", "'0123456789abcdef0123456789abcdef0123'", "message_id must be a UUID"},
		{"a message_id as a blob", "message_id", "randomblob(36)", "message_id must be a UUID"},
		{"created_at as text", "created_at", "'yesterday'", "created_at must be an integer"},
		{"created_at as a real", "created_at", "1500000000000000.5", "created_at must be an integer"},
		{"created_at past year 9999", "created_at", "253402300800000000", "created_at must be an integer"},
		{"created_at at Go's zero time", "created_at", "-62135596800000000", "created_at must be an integer"},
		{"available_at as text", "available_at", "'soon'", "available_at must be an integer"},
		{"lease_until as text", "lease_until", "'x'", "lease_until must be NULL"},
		{"attempted_at as a real", "attempted_at", "0.5", "attempted_at must be NULL"},
		{"attempts negative", "attempts", "-1", "attempts must be an integer from 0"},
		{"attempts as text", "attempts", "'many'", "attempts must be an integer from 0"},
	}
	for _, c := range cases {
		_, err := d.DB().Exec("INSERT INTO mensageria_outbox (type, key, " + c.columns + ") VALUES ('ok', 'k', " + c.values + ")")
		var se *msqlite.Error
		if !errors.As(err, &se) || se.Code() != sqlite3.SQLITE_CONSTRAINT_TRIGGER || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: err = %v, want SQLITE_CONSTRAINT_TRIGGER saying %q", c.what, err, c.says)
		}
	}
	if n := count(t, d); n != 0 {
		t.Fatalf("%d rows stored, want none", n)
	}
	// The defaults, an upper-case UUID and the edges of the years pass.
	if _, err := d.DB().Exec(`INSERT INTO mensageria_outbox (type, key) VALUES ('ok', 'default');
		INSERT INTO mensageria_outbox (type, key, message_id, created_at, available_at, attempts)
		VALUES ('ok', 'edges', '0190F0E2-7C3B-7DEF-8ABC-0123456789AB', -62135596799999999, 253402300799999999, 1000000000)`); err != nil {
		t.Fatalf("readable rows refused: %v", err)
	}
}

// An upgrade with pending rows that break migration 7's rules does not
// fail: each is parked dead with a reason naming the column, the other
// rows stay as they were, and the good rows are then claimed.
func TestUpgradeParksUnreadableRows(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	d := openT(t, path, nil)
	ms, err := d.MigrationSQL(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:6] {
		if _, err := d.DB().Exec(m.SQL); err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
	}
	own(t, d, "a", "t")
	if _, err := d.DB().Exec(`INSERT INTO mensageria_outbox (type, key) VALUES ('t', 'good');
		INSERT INTO mensageria_outbox (type, key, message_id) VALUES ('t', 'bad-id', 'order-0001-created-by-java-app-00001');
		INSERT INTO mensageria_outbox (type, key, created_at) VALUES ('t', 'bad-created', 'yesterday');
		INSERT INTO mensageria_outbox (type, key, available_at) VALUES ('t', 'bad-available', 'soon');
		INSERT INTO mensageria_outbox (type, key, message_id, state) VALUES ('t', 'dead-bad-id', 'order-0002-created-by-java-app-00002', 'dead')`); err != nil {
		t.Fatal(err)
	}
	res, err := d.Migrate(t.Context(), driver.MigrateParams{Mode: driver.MigrateUp})
	if err != nil || !slices.Contains(res.Applied, 7) {
		t.Fatalf("upgrade = %+v, %v; want migration 7 applied", res, err)
	}
	jobs, err := d.ListMessages(t.Context(), driver.ListFilter{Limit: 100})
	if err != nil {
		t.Fatalf("ListMessages over unreadable rows: %v", err)
	}
	want := map[string]string{
		"bad-id":        `unreadable row: message_id is not a UUID ('order-0001-created-by-java-app-00001')`,
		"bad-created":   `created_at is not unix microseconds in years 1 to 9999 ('yesterday')`,
		"bad-available": `available_at is not unix microseconds`,
	}
	for _, j := range jobs {
		switch says, bad := want[j.Key]; {
		case j.Key == "good":
			if j.State != driver.StatePending || j.Unreadable != "" {
				t.Errorf("good row = %s (%q), want pending and readable", j.State, j.Unreadable)
			}
		case j.Key == "dead-bad-id":
			if j.LastError != "" || !strings.Contains(j.Unreadable, "message_id is not a UUID") {
				t.Errorf("dead row = %q, %q; want it untouched and listed as unreadable", j.LastError, j.Unreadable)
			}
		case bad:
			if j.State != driver.StateDead || !strings.Contains(j.LastError, says) || !strings.Contains(j.LastError, "migration 7") {
				t.Errorf("row %s = %s %q, want dead saying %q", j.Key, j.State, j.LastError, says)
			}
		}
	}
	claimed, err := d.Claim(t.Context(), driver.ClaimParams{Types: []string{"t"}, Limit: 10, Lease: time.Minute, Token: 1})
	if err != nil || len(claimed) != 1 || claimed[0].Key != "good" {
		t.Fatalf("claim after the upgrade = %+v, %v; want the good row alone", claimed, err)
	}
}

// A row a plain INSERT stored past the rules (here with migration 7's
// trigger dropped, as on a database written before it) is claimed with
// its batch, read apart: unreadable, naming the column, while the other
// rows of every type claim as ever; it parks dead under the claim's token.
// Stats counts it. Before, "not a UUID" failed every claim of the app.
func TestClaimReadsEachRowApart(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	own(t, d, "a", "t", "u")
	if _, err := d.DB().Exec(`DROP TRIGGER mensageria_outbox_enqueue_readable;
		INSERT INTO mensageria_outbox (type, key) VALUES ('t', 'good-1'), ('u', 'good-u');
		INSERT INTO mensageria_outbox (type, key, message_id) VALUES ('t', 'bad-id', 'order-0001-created-by-java-app-00001');
		INSERT INTO mensageria_outbox (type, key, created_at) VALUES ('t', 'bad-created', 'yesterday');
		INSERT INTO mensageria_outbox (type, key, created_at) VALUES ('t', 'real-created', 1.5);
		INSERT INTO mensageria_outbox (type, key, attempts) VALUES ('t', 'attempts-max', 9223372036854775807);
		INSERT INTO mensageria_outbox (type, key, payload) VALUES ('t', 'blob-payload', x'7b7d');
		INSERT INTO mensageria_outbox (type, key) VALUES ('t', 'good-2')`); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Stats(t.Context()); err != nil {
		t.Fatalf("Stats with unreadable rows pending: %v", err)
	}
	const token = 9
	jobs, err := d.Claim(t.Context(), driver.ClaimParams{Types: []string{"t", "u"}, Limit: 20, Lease: time.Minute, Token: token})
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	want := map[string]string{
		"good-1": "", "good-2": "", "good-u": "", "attempts-max": "", "blob-payload": "",
		"bad-id":       `message_id is not a UUID (text "order-0001-created-by-java-app-00001")`,
		"bad-created":  `created_at is not an integer of unix microseconds (text "yesterday")`,
		"real-created": `created_at is not an integer of unix microseconds (real 1.5)`,
	}
	if len(jobs) != len(want) {
		t.Fatalf("claimed %d rows, want %d: %+v", len(jobs), len(want), jobs)
	}
	p := driver.SettleParams{Token: token}
	for _, j := range jobs {
		if j.Unreadable != want[j.Key] {
			t.Errorf("row %s: Unreadable %q, want %q", j.Key, j.Unreadable, want[j.Key])
		}
		if j.Key == "attempts-max" && j.Attempt != 1000000001 {
			t.Errorf("row with attempts 2^63-1 claimed as attempt %d, want it counted from 1,000,000,000", j.Attempt)
		}
		if j.Unreadable != "" {
			p.Dead = append(p.Dead, driver.Failure{ID: j.ID, Error: "unreadable row: " + j.Unreadable})
		} else {
			p.Delivered = append(p.Delivered, j.ID)
		}
	}
	if res, err := d.Settle(t.Context(), driver.SettleParams{Token: token + 1, Dead: p.Dead}); err != nil || len(res.Settled) != 0 {
		t.Fatalf("settle under another token = %+v, %v; want nothing settled", res, err)
	}
	if res, err := d.Settle(t.Context(), p); err != nil || len(res.Settled) != len(jobs) {
		t.Fatalf("Settle = %+v, %v; want all %d settled", res, err, len(jobs))
	}
	stats, err := d.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if s.Type == "t" && (s.Dead != 3 || s.Pending != 0) {
			t.Fatalf("Stats of t = %+v, want 3 dead and nothing pending", s)
		}
	}
}
