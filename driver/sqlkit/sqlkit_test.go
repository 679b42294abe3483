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
	statsCols := []string{"type", "pending", "in_flight", "dead", "delivered", "oldest", "in_doubt", "oldest_doubt", "scheduled"}
	f := &fakeDB{results: map[string]fakeResult{
		"stats": {cols: statsCols, rows: [][]sqldriver.Value{
			v("b", int64(1), int64(0), int64(0), int64(0), nil, int64(0), nil, int64(0)),
			v("a", int64(2), int64(1), int64(3), int64(4), now-2_000_000, int64(1), now-1_000_000, int64(5)),
			v("a", int64(1), int64(1), int64(1), int64(1), now-5_000_000, int64(1), nil, int64(1)),
		}},
		"owners": {cols: []string{"type", "app"}, rows: [][]sqldriver.Value{v("a", "billing"), v("zzz", "other")}},
	}}
	db := openFake(t, f)
	got, err := sqlkit.CollectStats(context.Background(), db, now, "stats", []any{now}, "owners", wrap)
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
	if _, err := sqlkit.CollectStats(context.Background(), db, now, "stats", nil, "owners", wrap); !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "test: stats owners: ") {
		t.Fatalf("owners failing: err = %v", err)
	}
	f.results["stats"] = fakeResult{err: boom}
	if _, err := sqlkit.CollectStats(context.Background(), db, now, "stats", nil, "owners", wrap); !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "test: stats: ") {
		t.Fatalf("stats failing: err = %v", err)
	}
}

func TestSettlementSortsTheRowsItDidNotChange(t *testing.T) {
	ctx := context.Background()
	f := &fakeDB{results: map[string]fakeResult{
		"delivered": {cols: []string{"id", "type"}, rows: [][]sqldriver.Value{v(int64(1), "a"), v(int64(2), "b"), v(int64(3), "a")}},
		"released":  {cols: []string{"id", "type"}, rows: [][]sqldriver.Value{v(int64(4), "a")}},
		"sort":      {cols: []string{"id"}, rows: [][]sqldriver.Value{v(int64(6))}},
	}}
	db := openFake(t, f)
	s := sqlkit.NewSettlement()
	for _, c := range []struct {
		q         string
		delivered bool
		want      []int64
	}{{"delivered", true, []int64{1, 2, 3}}, {"released", false, []int64{4}}} {
		rows, err := db.QueryContext(ctx, c.q)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := s.Read(rows, c.delivered)
		if err != nil || !reflect.DeepEqual(ids, c.want) {
			t.Fatalf("Read(%s) = %v, %v; want %v", c.q, ids, err, c.want)
		}
	}
	if got, want := s.Delivered(), map[string]int64{"a": 2, "b": 1}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Delivered = %v, want %v", got, want)
	}
	var asked []int64
	res, err := s.Sort([]int64{1, 5, 2, 6, 3, 4, 7}, func(rest []int64) (*sql.Rows, error) {
		asked = rest
		return db.QueryContext(ctx, "sort")
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(asked, []int64{5, 6, 7}) {
		t.Fatalf("Sort asked about %v, want [5 6 7]", asked)
	}
	want := driver.SettleResult{Settled: []int64{1, 2, 3, 4}, Expired: []int64{6}, Fenced: []int64{5, 7}}
	if !reflect.DeepEqual(res, want) {
		t.Fatalf("Sort = %+v, want %+v", res, want)
	}

	res, err = s.Sort([]int64{4, 1}, func([]int64) (*sql.Rows, error) {
		t.Fatal("Sort read the rows with every row settled")
		return nil, nil
	})
	if err != nil || !reflect.DeepEqual(res, driver.SettleResult{Settled: []int64{4, 1}}) {
		t.Fatalf("Sort of settled rows = %+v, %v", res, err)
	}
	boom := errors.New("boom")
	if _, err := s.Sort([]int64{9}, func([]int64) (*sql.Rows, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("Sort with a failing read: err = %v", err)
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

// steps records the order Settle runs them in, failing at fail.
type steps struct {
	ran  []string
	fail string
}

func (s *steps) step(name string) error {
	s.ran = append(s.ran, name)
	if name == s.fail {
		return errors.New(name + " failed")
	}
	return nil
}

func (s *steps) Delivered() error { return s.step("delivered") }
func (s *steps) Released() error  { return s.step("released") }
func (s *steps) Failed() error    { return s.step("failed") }
func (s *steps) Sort(all []int64) (driver.SettleResult, error) {
	return driver.SettleResult{Settled: all}, s.step("sort")
}

func TestSettleRunsTheStepsInOrderAndStopsAtAnError(t *testing.T) {
	s := &steps{}
	res, err := sqlkit.Settle(s, []int64{1, 2})
	if err != nil || !reflect.DeepEqual(res.Settled, []int64{1, 2}) {
		t.Fatalf("Settle = %+v, %v", res, err)
	}
	if want := []string{"delivered", "released", "failed", "sort"}; !reflect.DeepEqual(s.ran, want) {
		t.Fatalf("ran %v, want %v", s.ran, want)
	}
	s = &steps{fail: "released"}
	res, err = sqlkit.Settle(s, []int64{1})
	if err == nil || !reflect.DeepEqual(res, driver.SettleResult{}) {
		t.Fatalf("Settle with a failing step = %+v, %v", res, err)
	}
	if want := []string{"delivered", "released"}; !reflect.DeepEqual(s.ran, want) {
		t.Fatalf("ran %v, want %v", s.ran, want)
	}
}
