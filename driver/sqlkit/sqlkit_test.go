package sqlkit_test

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlkit"
)

func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("test: %s: %w", op, err)
}

func TestLoaderFillsFragmentsAndPanicsOnAMissingStatement(t *testing.T) {
	fsys := fstest.MapFS{"queries/claim.sql": {Data: []byte("SELECT * FROM {{p}}outbox")}}
	load := sqlkit.Loader(fsys, "queries", strings.NewReplacer("{{p}}", "x_"))
	if got := load("claim"); got != "SELECT * FROM x_outbox" {
		t.Fatalf("load(claim) = %q", got)
	}
	if got := sqlkit.Loader(fsys, "queries", nil)("claim"); got != "SELECT * FROM {{p}}outbox" {
		t.Fatalf("without fragments = %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a missing statement did not panic")
		}
	}()
	load("settle")
}

func TestDedupe(t *testing.T) {
	got := sqlkit.Dedupe([]string{"b", "", "a", "b", "c", "a"})
	if want := []string{"b", "a", "c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Dedupe = %v, want %v", got, want)
	}
	if got := sqlkit.Dedupe(nil); len(got) != 0 {
		t.Fatalf("Dedupe(nil) = %v", got)
	}
}

func TestMarks(t *testing.T) {
	for n, want := range map[int]string{0: "NULL", 1: "?", 3: "?, ?, ?"} {
		if got := sqlkit.Marks(n); got != want {
			t.Errorf("Marks(%d) = %q, want %q", n, got, want)
		}
	}
	c, args := sqlkit.InMarks("id", []int64{4, 5})
	if c != "id IN (?, ?)" || !reflect.DeepEqual(args, []any{int64(4), int64(5)}) {
		t.Fatalf("InMarks = %q %v", c, args)
	}
}

func TestAgeOf(t *testing.T) {
	now := int64(10_000_000)
	for _, c := range []struct {
		us   sql.NullInt64
		want time.Duration
	}{
		{sql.NullInt64{}, 0},
		{sql.NullInt64{Int64: now + 1, Valid: true}, 0},
		{sql.NullInt64{Int64: now, Valid: true}, 0},
		{sql.NullInt64{Int64: now - 1500, Valid: true}, 1500 * time.Microsecond},
		{sql.NullInt64{Int64: math.MinInt64, Valid: true}, math.MaxInt64}, // overflows
		{sql.NullInt64{Int64: now - math.MaxInt64/1000 - 1, Valid: true}, math.MaxInt64},
	} {
		if got := sqlkit.AgeOf(c.us, now); got != c.want {
			t.Errorf("AgeOf(%v) = %v, want %v", c.us, got, c.want)
		}
	}
}

// inJSON stands for a driver's other way of writing a list.
func inJSON[T any](col string, values []T) (string, []any) {
	return col + " IN (SELECT value FROM json_each(?))", []any{fmt.Sprint(values)}
}

func TestListQueryHasOnlyTheFiltersGiven(t *testing.T) {
	l := sqlkit.List{
		Select:    "SELECT c FROM t",
		Args:      []any{"now"},
		Doubt:     "(doubt ?)",
		DoubtArgs: []any{"now2"},
		Types:     sqlkit.InMarks[string],
		IDs:       inJSON[int64],
	}
	for _, c := range []struct {
		f     driver.ListFilter
		query string
		args  []any
	}{
		{driver.ListFilter{}, "SELECT c FROM t ORDER BY id LIMIT ?", []any{"now", 100}},
		{driver.ListFilter{State: driver.StateInDoubt, Limit: 5}, "SELECT c FROM t WHERE (doubt ?) ORDER BY id LIMIT ?", []any{"now", "now2", 5}},
		{driver.ListFilter{State: driver.StatePending}, "SELECT c FROM t WHERE state = 'pending' AND NOT (doubt ?) ORDER BY id LIMIT ?", []any{"now", "now2", 100}},
		{
			driver.ListFilter{State: driver.StateDead, Types: []string{"a", "b"}, IDs: []int64{1, 2}, AfterID: 9, Limit: 1 << 20},
			"SELECT c FROM t WHERE state = ? AND type IN (?, ?) AND id IN (SELECT value FROM json_each(?)) AND id > ? ORDER BY id LIMIT ?",
			[]any{"now", "dead", "a", "b", "[1 2]", int64(9), 10000},
		},
	} {
		q, args := l.Query(c.f)
		if q != c.query || !reflect.DeepEqual(args, c.args) {
			t.Errorf("Query(%+v) =\n %q %v\nwant\n %q %v", c.f, q, args, c.query, c.args)
		}
	}
	if len(l.Args) != 1 {
		t.Fatalf("Query changed List.Args: %v", l.Args)
	}
}

func TestReviveBuildsItsWhereFromTheSelections(t *testing.T) {
	ctx := context.Background()
	const upd = "UPDATE x_outbox SET state = 'pending', attempts = 0, available_at = ?, lease_token = NULL, lease_until = NULL, attempted_at = NULL WHERE "
	for _, c := range []struct {
		p    driver.ReviveParams
		want []string
	}{
		{driver.ReviveParams{}, nil},
		{driver.ReviveParams{IDs: []int64{1, 2}}, []string{upd + "state = 'dead' AND id IN (?, ?) AND attempted_at IS NULL | 77 | 1 | 2"}},
		{driver.ReviveParams{Types: []string{"a"}, ClearMark: true}, []string{upd + "state = 'dead' AND type IN (SELECT value FROM json_each(?)) | 77 | [a]"}},
		{driver.ReviveParams{IDs: []int64{3}, Types: []string{"a"}, Discard: true}, []string{"DELETE FROM x_outbox WHERE state = 'dead' AND id IN (?) AND type IN (SELECT value FROM json_each(?)) | 3 | [a]"}},
	} {
		f := &fakeDB{affected: 2}
		db := openFake(t, f)
		n, err := sqlkit.Revive(ctx, db, "x_", c.p, sqlkit.InMarks[int64], inJSON[string], 77, wrap)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.statements(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Revive(%+v) ran\n %q\nwant\n %q", c.p, got, c.want)
		}
		if wantN := min(len(c.want), 1) * 2; n != wantN {
			t.Errorf("Revive(%+v) = %d, want %d", c.p, n, wantN)
		}
	}
}

func v(vals ...any) []sqldriver.Value {
	out := make([]sqldriver.Value, len(vals))
	for i, x := range vals {
		out[i] = x
	}
	return out
}

func TestCollectStatsAddsUpBranchesAndNamesOwners(t *testing.T) {
	const now = int64(100_000_000)
	statsCols := []string{"type", "pending", "in_flight", "dead", "delivered", "oldest", "in_doubt", "oldest_doubt", "scheduled", "now"}
	f := &fakeDB{results: map[string]fakeResult{
		"stats": {cols: statsCols, rows: [][]sqldriver.Value{
			v("b", int64(1), int64(0), int64(0), int64(0), nil, int64(0), nil, int64(0), now),
			v("a", int64(2), int64(1), int64(3), int64(4), now-2_000_000, int64(1), now-1_000_000, int64(5), now),
			v("a", int64(1), int64(1), int64(1), int64(1), now-5_000_000, int64(1), nil, int64(1), now),
		}},
		"owners": {cols: []string{"type", "app"}, rows: [][]sqldriver.Value{v("a", "billing"), v("zzz", "other")}},
	}}
	db := openFake(t, f)
	got, err := sqlkit.CollectStats(context.Background(), db, "stats", []any{now}, "owners", wrap)
	if err != nil {
		t.Fatal(err)
	}
	want := []driver.TypeStats{
		{Type: "a", Pending: 3, InFlight: 2, Dead: 4, DeliveredLastHr: 5, OldestPending: 5 * time.Second, InDoubt: 2, OldestInDoubt: time.Second, Scheduled: 6, Owner: "billing"},
		{Type: "b", Pending: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("CollectStats =\n %+v\nwant\n %+v", got, want)
	}
	if log := f.statements(); !reflect.DeepEqual(log, []string{"stats | 100000000", "owners"}) {
		t.Fatalf("statements = %q", log)
	}

	boom := errors.New("boom")
	f.results["owners"] = fakeResult{err: boom}
	if _, err := sqlkit.CollectStats(context.Background(), db, "stats", nil, "owners", wrap); !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "test: stats owners: ") {
		t.Fatalf("owners failing: err = %v", err)
	}
	f.results["stats"] = fakeResult{err: boom}
	if _, err := sqlkit.CollectStats(context.Background(), db, "stats", nil, "owners", wrap); !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "test: stats: ") {
		t.Fatalf("stats failing: err = %v", err)
	}
}

func TestSettleSortsTheRowsItDidNotChange(t *testing.T) {
	ctx := context.Background()
	f := &fakeDB{results: map[string]fakeResult{
		"delivered": {cols: []string{"id", "type"}, rows: [][]sqldriver.Value{v(int64(1), "a"), v(int64(2), "b"), v(int64(3), "a")}},
		"released":  {cols: []string{"id", "type"}, rows: [][]sqldriver.Value{v(int64(4), "a")}},
		"sort":      {cols: []string{"id"}, rows: [][]sqldriver.Value{v(int64(6))}},
	}}
	db := openFake(t, f)
	change := func(s *sqlkit.Settlement) error {
		for _, c := range []struct {
			q         string
			delivered bool
			want      []int64
		}{{"delivered", true, []int64{1, 2, 3}}, {"released", false, []int64{4}}} {
			rows, err := db.QueryContext(ctx, c.q)
			if err != nil {
				return err
			}
			ids, err := s.Read(rows, c.delivered)
			if err != nil || !reflect.DeepEqual(ids, c.want) {
				t.Fatalf("Read(%s) = %v, %v; want %v", c.q, ids, err, c.want)
			}
		}
		return nil
	}
	var counted map[string]int64
	var asked []int64
	res, err := sqlkit.Settle([]int64{1, 5, 2, 6, 3, 4, 7}, sqlkit.SettleSteps{
		Change: change,
		Count:  func(perType map[string]int64) error { counted = perType; return nil },
		Expired: func(rest []int64) (*sql.Rows, error) {
			asked = rest
			return db.QueryContext(ctx, "sort")
		},
	}, wrap)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"a": 2, "b": 1}; !reflect.DeepEqual(counted, want) {
		t.Fatalf("counted %v, want %v", counted, want)
	}
	if !reflect.DeepEqual(asked, []int64{5, 6, 7}) {
		t.Fatalf("Expired asked about %v, want [5 6 7]", asked)
	}
	want := driver.SettleResult{Settled: []int64{1, 2, 3, 4}, Expired: []int64{6}, Fenced: []int64{5, 7}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("Settle = %+v, want %+v", res, want)
	}

	// Every row changed: no read of the rest; nothing delivered: no count.
	res, err = sqlkit.Settle([]int64{4}, sqlkit.SettleSteps{
		Change: func(s *sqlkit.Settlement) error {
			rows, err := db.QueryContext(ctx, "released")
			if err != nil {
				return err
			}
			_, err = s.Read(rows, false)
			return err
		},
		Count: func(map[string]int64) error { t.Fatal("Count with nothing delivered"); return nil },
		Expired: func([]int64) (*sql.Rows, error) {
			t.Fatal("Expired read the rows with every row settled")
			return nil, nil
		},
	}, wrap)
	if err != nil || !reflect.DeepEqual(res, driver.SettleResult{Settled: []int64{4}}) {
		t.Fatalf("Settle of settled rows = %+v, %v", res, err)
	}
}

func TestCountDeliveredAddsToTheMinuteInOneOrder(t *testing.T) {
	f := &fakeDB{}
	db := openFake(t, f)
	now := 5*time.Minute.Microseconds() + 1234
	if err := sqlkit.CountDelivered(context.Background(), db, "count", map[string]int64{"c": 1, "a": 2, "b": 3}, now); err != nil {
		t.Fatal(err)
	}
	minute := 5 * time.Minute.Microseconds()
	want := []string{
		fmt.Sprintf("count | a | %d | 2", minute),
		fmt.Sprintf("count | b | %d | 3", minute),
		fmt.Sprintf("count | c | %d | 1", minute),
	}
	if got := f.statements(); !reflect.DeepEqual(got, want) {
		t.Fatalf("statements =\n %q\nwant\n %q", got, want)
	}
}

// Settle stops at the first step that fails, names it, and returns no
// result.
func TestSettleStopsAtAnError(t *testing.T) {
	ctx := context.Background()
	db := openFake(t, &fakeDB{results: map[string]fakeResult{
		"delivered": {cols: []string{"id", "type"}, rows: [][]sqldriver.Value{v(int64(1), "a")}},
	}})
	boom := errors.New("boom")
	deliver := func(s *sqlkit.Settlement) error {
		rows, err := db.QueryContext(ctx, "delivered")
		if err != nil {
			return err
		}
		_, err = s.Read(rows, true)
		return err
	}
	for _, c := range []struct {
		name  string
		steps sqlkit.SettleSteps
		want  string
	}{
		{"change", sqlkit.SettleSteps{
			Change: func(*sqlkit.Settlement) error { return boom },
			Count:  func(map[string]int64) error { t.Fatal("Count after a failed change"); return nil },
		}, "test: settle: boom"},
		{"count", sqlkit.SettleSteps{
			Change:  deliver,
			Count:   func(map[string]int64) error { return boom },
			Expired: func([]int64) (*sql.Rows, error) { t.Fatal("Expired after a failed count"); return nil, nil },
		}, "test: settle counts: boom"},
		{"expired", sqlkit.SettleSteps{
			Change:  deliver,
			Count:   func(map[string]int64) error { return nil },
			Expired: func([]int64) (*sql.Rows, error) { return nil, boom },
		}, "test: settle: boom"},
	} {
		res, err := sqlkit.Settle([]int64{1, 2}, c.steps, wrap)
		if !errors.Is(err, boom) || err.Error() != c.want || !reflect.DeepEqual(res, driver.SettleResult{}) {
			t.Fatalf("%s failing: %+v, %v; want no result and %q", c.name, res, err, c.want)
		}
	}
}

// CheckQueries names a file no statement holds, a statement with a
// fragment left, a file without its comment, and a count that differs.
func TestCheckQueries(t *testing.T) {
	fsys := fstest.MapFS{
		"queries/a.sql": {Data: []byte("-- a\nSELECT * FROM {{p}}a WHERE id IN ({{ids}})")},
		"queries/b.sql": {Data: []byte("SELECT 1")},
		"queries/c.sql": {Data: []byte("-- c\nSELECT {{x}}")},
	}
	fill := strings.NewReplacer("{{p}}", "x_")
	lists := func(q string) string { return strings.ReplaceAll(q, "{{ids}}", "?") }
	type good struct{ a, b, c string }
	if err := sqlkit.CheckQueries(fsys, "queries", fill, good{
		a: "-- a\nSELECT * FROM x_a WHERE id IN ({{ids}})", b: "SELECT 1", c: "-- c\nSELECT {{x}}",
	}, lists); err == nil {
		t.Fatal("no error for b without a comment and c's {{x}}")
	} else if got := err.Error(); !strings.Contains(got, "queries/b.sql does not start with a comment") ||
		!strings.Contains(got, "c keeps a fragment unfilled") || strings.Contains(got, "a keeps") || strings.Contains(got, "loaded into no") {
		t.Fatalf("err = %v", err)
	}
	type missing struct{ a string }
	err := sqlkit.CheckQueries(fsys, "queries", fill, missing{a: "-- a\nSELECT * FROM x_a WHERE id IN ({{ids}})"}, lists)
	if err == nil || !strings.Contains(err.Error(), "queries/c.sql is loaded into no statement") || !strings.Contains(err.Error(), "3 files in queries, 1 statements") {
		t.Fatalf("err = %v", err)
	}
	if err := sqlkit.CheckQueries(fstest.MapFS{"queries/a.sql": {Data: []byte("-- a\nSELECT 1")}}, "queries", fill, struct{ a string }{"-- a\nSELECT 1"}, nil); err != nil {
		t.Fatalf("one file, one statement: %v", err)
	}
}

// PerPrefix loads each prefix's statements once, and apart from the
// others'.
func TestPerPrefixLoadsEachPrefixOnce(t *testing.T) {
	var loads []string
	q := sqlkit.PerPrefix(func(prefix string) string { loads = append(loads, prefix); return "SELECT * FROM " + prefix + "t" })
	for _, p := range []string{"a_", "b_", "a_"} {
		if got, want := q(p), "SELECT * FROM "+p+"t"; got != want {
			t.Fatalf("q(%s) = %q, want %q", p, got, want)
		}
	}
	if !reflect.DeepEqual(loads, []string{"a_", "b_"}) {
		t.Fatalf("loaded %v, want each prefix once", loads)
	}
}

// ClaimTypes: nothing to claim is no error, whatever the lease; a claim
// with something to claim needs a lease.
func TestClaimTypes(t *testing.T) {
	for _, c := range []struct {
		types []string
		limit int
		lease time.Duration
		want  []string
		err   bool
	}{
		{[]string{"a", "", "b", "a"}, 1, time.Second, []string{"a", "b"}, false},
		{nil, 1, 0, nil, false},
		{[]string{""}, 1, 0, nil, false},
		{[]string{"a"}, 0, 0, nil, false},
		{[]string{"a"}, 1, 0, nil, true},
		{[]string{"a"}, 1, -time.Second, nil, true},
	} {
		got, err := sqlkit.ClaimTypes(c.types, c.limit, c.lease)
		if !reflect.DeepEqual(got, c.want) || (err != nil) != c.err {
			t.Errorf("ClaimTypes(%q, %d, %s) = %q, %v", c.types, c.limit, c.lease, got, err)
		}
	}
}
