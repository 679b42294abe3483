package sqlite_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
)

// The chart's counts: the window's minutes of the types asked for, in
// type and minute order, read by a primary-key range per type.
func TestDeliveredPerMinute(t *testing.T) {
	ctx := context.Background()
	d := openT(t, filepath.Join(t.TempDir(), "m.db"), nil)
	if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().Truncate(time.Minute)
	us := func(ago time.Duration) int64 { return now.Add(-ago).UnixMicro() }
	execT(t, d, `INSERT INTO mensageria_delivered_counts (type, minute, n) VALUES
		('a', ?, 5), ('a', ?, 4), ('a', ?, 99), ('b', ?, 7), ('c', ?, 11)`,
		us(0), us(time.Minute), us(2*time.Hour), us(59*time.Minute), us(0))
	got, err := d.DeliveredPerMinute(ctx, []string{"b", "a", "none"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].Type != "a" || got[0].N != 4 || got[1].N != 5 || got[2].Type != "b" || got[2].N != 7 || !got[1].Minute.Equal(now) {
		t.Fatalf("got %+v", got)
	}
	rows, err := d.DB().Query(`EXPLAIN QUERY PLAN SELECT d.type, d.minute, d.n FROM mensageria_delivered_counts d
		WHERE d.type IN (SELECT value FROM json_each(?1)) AND d.minute > ?2 ORDER BY d.type, d.minute`, `["a"]`, 0)
	if err != nil {
		t.Fatal(err)
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
	p := strings.Join(plan, "; ")
	if !strings.Contains(p, "SEARCH d USING PRIMARY KEY (type=? AND minute>?)") {
		t.Fatalf("plan %q: want a primary-key range per type", p)
	}
}
