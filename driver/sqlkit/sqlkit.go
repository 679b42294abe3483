// Package sqlkit is the toolkit of the mensageria drivers built on
// database/sql (driver/sqlite, driver/mysql): the logic their parts share
// that does not depend on the dialect, written once. A driver keeps its own
// statements (its queries/*.sql), its clock, its locking and its errors'
// wording; what it gets here is what is the same whatever the SQL:
//
//   - Loader, reading the named statements of an embedded queries/ folder
//     and filling in the driver's fragments, PerPrefix, keeping them for
//     each table prefix, and CheckQueries, which the
//     drivers' tests run to hold the folder and the statements to one set;
//   - CollectStats and AgeOf, turning the rows of a stats statement and of
//     its owners statement into driver.TypeStats;
//   - List.Query and Revive, building the statements of ListMessages and
//     Revive with a WHERE of only the filters given, each list written the
//     driver's own way (an In: InMarks, or the driver's, such as SQLite's
//     one JSON array);
//   - Settle, running a driver's SettleSteps (its changes, its count of
//     the deliveries, its read of the rows past their lease) with the
//     bookkeeping of one Settle, a Settlement: the rows it changed, the
//     deliveries per type, and the sorting of the others into Expired and
//     Fenced; CountDelivered, adding the deliveries to the minute's counts;
//   - DoubtAt, the test of a row in doubt; ClaimTypes, the check of a
//     claim's types, limit and lease;
//   - Dedupe, Marks and Args, small helpers every statement on a list
//     uses.
//
// Where the drivers differ on purpose it has nothing: the clock (SQLite's
// julianday('now') in milliseconds, MariaDB's UTC_TIMESTAMP(6)), the
// write transaction (SQLite's one writer a file behind a process gate and
// BEGIN IMMEDIATE, MySQL's transaction retried after a deadlock), the
// change of a settled row (SQLite's UPDATE … RETURNING, MySQL's locking
// read and then the change), the reading of a row (SQLite stores any
// value in any column, so its rows are read as values of any type) and
// the errors the tables raise.
//
// It is named sqlkit, not sqldriver, because database/sql/driver is
// commonly imported under that name.
//
// It is public, not internal, because each driver is a module of its own:
// a module may import only the core's public packages
// (docs/development.md). It imports database/sql and the core's driver
// package only, never a database driver, so that the core module stays
// free of them. Its API follows the drivers' needs and may change with
// them before v1.
package sqlkit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xadm/mensageria/driver"
)

// Querier runs a statement that returns rows: a *sql.DB, *sql.Tx or
// *sql.Conn.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// Execer runs a statement that returns no rows: a *sql.DB, *sql.Tx or
// *sql.Conn.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Wrap names the operation of an error the way a driver words its errors
// ("mensageria/<driver>: <op>: <err>"); it returns nil for a nil err.
type Wrap func(op string, err error) error

// Loader returns a function that reads the statement name from dir/name.sql
// of fsys, with fill's fragments replaced (a nil fill replaces none). A
// statement that is not there panics: the folder is embedded at build
// time, so a missing one is a broken build, caught by the first Open.
func Loader(fsys fs.FS, dir string, fill *strings.Replacer) func(name string) string {
	return func(name string) string {
		b, err := fs.ReadFile(fsys, path.Join(dir, name+".sql"))
		if err != nil {
			panic(err) // embedded at build time; missing means a broken build
		}
		if fill == nil {
			return string(b)
		}
		return fill.Replace(string(b))
	}
}

// PerPrefix returns load with its result kept for each prefix: a driver's
// statements depend on its table prefix only, and reading and filling
// every file again for each driver opened shows in a program (or a test)
// that opens many.
func PerPrefix[Q any](load func(prefix string) Q) func(prefix string) Q {
	var loaded sync.Map // prefix -> Q
	return func(prefix string) Q {
		if q, ok := loaded.Load(prefix); ok {
			return q.(Q)
		}
		q, _ := loaded.LoadOrStore(prefix, load(prefix))
		return q.(Q)
	}
}

// CheckQueries tells whether the files of dir in fsys and a driver's
// statements, the string fields of a struct (as Loader read them with
// fill), are one set: a file whose text is no statement is one nothing
// runs, and a statement with a "{{" left once lists fills the lists a call
// fills (nil for none) is a name the database would refuse only when it
// first runs. A file must also start with a comment ("-- ") saying what it
// does. It returns every discrepancy, joined, or nil. The drivers' tests
// run it.
func CheckQueries(fsys fs.FS, dir string, fill *strings.Replacer, statements any, lists func(string) string) error {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return err
	}
	v := reflect.ValueOf(statements)
	if v.Kind() != reflect.Struct {
		return fmt.Errorf("statements is a %s, not a struct", v.Kind())
	}
	var errs []error
	texts := map[string]bool{}
	for i := range v.NumField() {
		name, text := v.Type().Field(i).Name, v.Field(i).String()
		texts[text] = true
		if lists != nil {
			text = lists(text)
		}
		if strings.Contains(text, "{{") {
			errs = append(errs, fmt.Errorf("%s keeps a fragment unfilled:\n%s", name, text))
		}
	}
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		if !texts[fill.Replace(string(b))] {
			errs = append(errs, fmt.Errorf("%s is loaded into no statement", name))
		}
		if !strings.HasPrefix(string(b), "-- ") {
			errs = append(errs, fmt.Errorf("%s does not start with a comment saying what it does", name))
		}
	}
	if len(names) != v.NumField() {
		errs = append(errs, fmt.Errorf("%d files in %s, %d statements", len(names), dir, v.NumField()))
	}
	return errors.Join(errs...)
}

// ClaimTypes checks a claim's types, limit and lease: it returns the
// types without repeats, none when there is nothing to claim (no type, or
// a limit below 1), and an error for a lease below 1ns when there is.
func ClaimTypes(types []string, limit int, lease time.Duration) ([]string, error) {
	types = Dedupe(types)
	if len(types) == 0 || limit <= 0 {
		return nil, nil
	}
	if lease <= 0 {
		return nil, fmt.Errorf("lease must be positive, got %s", lease)
	}
	return types, nil
}

// Dedupe is s without empty or repeated strings, in first-seen order.
func Dedupe(s []string) []string {
	out := make([]string, 0, len(s))
	seen := map[string]bool{}
	for _, v := range s {
		if v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// Marks returns n comma-separated placeholders; with n == 0 it returns a
// NULL, which matches nothing.
func Marks(n int) string {
	if n <= 0 {
		return "NULL"
	}
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// AgeOf is the age at now of a time in unix microseconds: none for a NULL
// or a time in the future, at most the longest Duration.
func AgeOf(us sql.NullInt64, now int64) time.Duration {
	if !us.Valid || us.Int64 >= now {
		return 0
	}
	if now-us.Int64 <= 0 || now-us.Int64 > math.MaxInt64/int64(time.Microsecond) { // overflowed, or past a Duration
		return math.MaxInt64
	}
	return time.Duration(now-us.Int64) * time.Microsecond
}

// CollectStats runs stats (with args) and owners on q and returns one
// driver.TypeStats a type, sorted by type. stats returns rows of type,
// pending, in flight, dead, delivered in the last hour, oldest pending
// (unix microseconds or NULL), in doubt, oldest in doubt, scheduled, and
// the clock the counts were taken at (unix microseconds), which the ages
// are taken at: a statement that reads the clock itself needs no round
// trip for it. The rows of one type (one from each branch of a UNION) are
// added up. owners returns rows of type and owning app. Errors are named
// "stats" and "stats owners" with wrap.
func CollectStats(ctx context.Context, q Querier, stats string, args []any, owners string, wrap Wrap) ([]driver.TypeStats, error) {
	rows, err := q.QueryContext(ctx, stats, args...)
	if err != nil {
		return nil, wrap("stats", err)
	}
	defer rows.Close()
	byType := map[string]*driver.TypeStats{}
	for rows.Next() {
		var s driver.TypeStats
		var oldest, oldestDoubt sql.NullInt64
		var now int64
		if err := rows.Scan(&s.Type, &s.Pending, &s.InFlight, &s.Dead, &s.DeliveredLastHr, &oldest, &s.InDoubt, &oldestDoubt, &s.Scheduled, &now); err != nil {
			return nil, wrap("stats", err)
		}
		s.OldestPending = AgeOf(oldest, now)
		s.OldestInDoubt = AgeOf(oldestDoubt, now)
		if prev, ok := byType[s.Type]; ok { // one row from each branch
			prev.Pending += s.Pending
			prev.InFlight += s.InFlight
			prev.Dead += s.Dead
			prev.DeliveredLastHr += s.DeliveredLastHr
			prev.OldestPending = max(prev.OldestPending, s.OldestPending)
			prev.InDoubt += s.InDoubt
			prev.OldestInDoubt = max(prev.OldestInDoubt, s.OldestInDoubt)
			prev.Scheduled += s.Scheduled
			continue
		}
		byType[s.Type] = &s
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("stats", err)
	}
	own, err := q.QueryContext(ctx, owners)
	if err != nil {
		return nil, wrap("stats owners", err)
	}
	defer own.Close()
	for own.Next() {
		var typ, app string
		if err := own.Scan(&typ, &app); err != nil {
			return nil, wrap("stats owners", err)
		}
		if s, ok := byType[typ]; ok {
			s.Owner = app
		}
	}
	if err := own.Err(); err != nil {
		return nil, wrap("stats owners", err)
	}
	out := make([]driver.TypeStats, 0, len(byType))
	for _, s := range byType {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b driver.TypeStats) int { return strings.Compare(a.Type, b.Type) })
	return out, nil
}
