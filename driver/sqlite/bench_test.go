package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
)

// BenchmarkEnqueueRules measures what the catalog's enqueue rules (the
// trigger's owner and header checks, the columns' shape CHECKs) cost an
// enqueue: the same inserts into a schema at version 2, the last without
// them ("before"), and at the newest ("catalog"), through Insert and
// through a plain SQL INSERT, one row per transaction and a hundred.
// Compare the rows/s of the two; BenchmarkEnqueueCheckParts takes the
// check apart in CPU time, which the shared machine's load moves less.
func BenchmarkEnqueueRules(b *testing.B) {
	for _, via := range []string{"go", "sql"} {
		for _, rows := range []int{1, 100} {
			for _, schema := range []string{"catalog", "before"} {
				b.Run(fmt.Sprintf("%s/rows=%d/%s", via, rows, schema), func(b *testing.B) { benchEnqueue(b, via, rows, schema == "catalog") })
			}
		}
	}
}

func benchEnqueue(b *testing.B, via string, n int, catalog bool) {
	ctx := context.Background()
	d, err := sqlite.Open(filepath.Join(b.TempDir(), "m.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	if catalog {
		if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
			b.Fatal(err)
		}
		if _, err := d.Register(ctx, driver.RegisterParams{App: "bench", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "order.created"}}}); err != nil {
			b.Fatal(err)
		}
	} else {
		ms, err := d.MigrationSQL(0)
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range ms[:2] {
			if _, err := d.DB().Exec(m.SQL); err != nil {
				b.Fatal(err)
			}
		}
	}
	headers := []byte(`{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","x-request-id":"req-1"}`)
	payload := []byte(`{"id":1,"total":"12.50","items":[{"sku":"a","qty":2}]}`)
	rows := make([]driver.InsertRow, n)
	sqlText := "INSERT INTO mensageria_outbox (type, key, payload, headers) VALUES " + strings.TrimSuffix(strings.Repeat("('order.created', ?, ?, ?), ", n), ", ")
	// Prepared once, as the clients people enqueue with do (Python's
	// sqlite3 keeps 128 statements; JDBC apps prepare theirs).
	stmt, err := d.DB().PrepareContext(ctx, sqlText)
	if err != nil {
		b.Fatal(err)
	}
	defer stmt.Close()
	args := make([]any, 0, 3*n)
	b.ResetTimer()
	for i := range b.N {
		switch via {
		case "go":
			for j := range rows {
				rows[j] = driver.InsertRow{MessageID: uuid.New(), Type: "order.created", Key: fmt.Sprint("order-", i, "-", j), Payload: payload, Headers: headers}
			}
			if err := d.Insert(ctx, driver.InsertParams{Rows: rows}); err != nil {
				b.Fatal(err)
			}
		case "sql":
			args = args[:0]
			for j := range n {
				args = append(args, fmt.Sprint("order-", i, "-", j), string(payload), string(headers))
			}
			if _, err := stmt.ExecContext(ctx, args...); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "rows/s")
}

// checkVariant is one schema BenchmarkEnqueueCheckParts enqueues into: the
// migrations up to upTo (0: all), each migration's text passed through
// edit when it is set, then the statements of after.
type checkVariant struct {
	name  string
	upTo  int
	edit  func(version int, sql string) string
	after []string
}

// shapeChecks are the named CHECKs of migration 3 on the type and the key
// (empty, length in bytes, NUL), each on a line of its own.
var shapeChecks = regexp.MustCompile(`(?m)^\s*CONSTRAINT "mensageria: the (message type|key) [^"]*" CHECK \(.*\)(,?)$`)

// withoutShapeChecks takes the type's and the key's named CHECKs out of
// migration 3's text, keeping the comma that ends the column.
func withoutShapeChecks(version int, sql string) string {
	if version != 3 {
		return sql
	}
	return shapeChecks.ReplaceAllString(sql, "$2")
}

// enqueueRulesTrigger returns the CREATE TRIGGER of the outbox's enqueue
// rules as migration `version` states it, with the prefix filled in.
func enqueueRulesTrigger(b *testing.B, d *sqlite.Driver, version int) string {
	ms, err := d.MigrationSQL(version - 1)
	if err != nil {
		b.Fatal(err)
	}
	text := ms[0].SQL
	start := strings.Index(text, "CREATE TRIGGER mensageria_outbox_enqueue_rules")
	end := strings.Index(text[max(start, 0):], "\nEND;")
	if start < 0 || end < 0 {
		b.Fatalf("migration %d has no enqueue rules trigger", version)
	}
	return text[start : start+end+len("\nEND;")]
}

// ruleBranches splits the rules trigger's text into what comes before its
// CASE's first WHEN, each WHEN branch (owner, NULL headers, not JSON, not
// an object, not strings), and what follows the last.
func ruleBranches(b *testing.B, trigger string) (head string, branches []string, tail string) {
	const when, end = "\n        WHEN ", "\n    END;"
	first, last := strings.Index(trigger, when), strings.LastIndex(trigger, end)
	if first < 0 || last < first {
		b.Fatalf("the rules trigger has no CASE of WHEN branches:\n%s", trigger)
	}
	for _, br := range strings.Split(trigger[first:last], when)[1:] {
		branches = append(branches, when+br)
	}
	if len(branches) != 5 || !strings.Contains(branches[0], "owners") || !strings.Contains(branches[4], "json_each") {
		b.Fatalf("the rules trigger's CASE is not the owner branch and four header branches:\n%s", trigger)
	}
	return trigger[:first], branches, trigger[last:]
}

// previousRowSkip is what the prev-row-skip variant adds to the owner
// branch, to measure it, not to use it: the lookup is skipped when the row
// this connection inserted last (last_insert_rowid(), the previous row of
// a multi-row INSERT) is of the same type. It is unsound (that row may be
// from an earlier transaction, its type released since) and, a seek for a
// seek, it costs what it saves.
const previousRowSkip = `AND NOT EXISTS (SELECT 1 FROM mensageria_outbox p WHERE p.id = last_insert_rowid() AND p.type = NEW.type)`

// headersTextTest is the branch the text-test variant puts before json_type
// and json_each: a cheap sufficient test on headers that json_valid
// accepted (canonical JSON in every SQLite version): a first '{' is an
// object, no colon followed by anything but a quote means every value is a
// string, no "" means no empty name.
const headersTextTest = `
        WHEN typeof(NEW.headers) = 'text' AND substr(NEW.headers, 1, 1) = '{'
             AND instr(NEW.headers, '""') = 0
             AND instr(replace(NEW.headers, ':"', ''), ':') = 0 THEN NULL`

// cpuTime is the process's user and system CPU time so far. SQLite runs in
// this process, so it is what an enqueue costs, whatever else the shared
// machine runs.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEnqueueCheckParts measures, in CPU time per row, what each part
// of the outbox's enqueue check costs, in alternating rounds: every
// variant's schema is enqueued into once per round, in a rotated order,
// from an empty table. The kinds are those of BenchmarkEnqueueRules: go-1
// and go-100 (Insert of 1 and 100 rows a transaction), sql-1 (a prepared
// plain INSERT of one row, autocommitted), and sql-2000 (one INSERT ...
// SELECT of 2000 rows: each part's cost per row, with nothing per
// statement around it). <kind>/<variant>/ratio is the
// median over the rounds of before's CPU per row over the variant's: the
// variant's rate relative to a schema without the check (the issue's
// target is at least 0.95). Run with -benchtime 1x; MENSAGERIA_BENCH_ROUNDS
// sets the rounds (default 7).
func BenchmarkEnqueueCheckParts(b *testing.B) {
	ctx := context.Background()
	probe, err := sqlite.Open(filepath.Join(b.TempDir(), "probe.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer probe.Close()
	v3 := enqueueRulesTrigger(b, probe, 3)
	head, br, tail := ruleBranches(b, v3)
	rules := func(parts ...string) string { return head + strings.Join(parts, "") + tail }
	drop := "DROP TRIGGER mensageria_outbox_enqueue_rules"
	variants := []checkVariant{
		{name: "before", upTo: 2},
		{name: "unchecked", edit: withoutShapeChecks, after: []string{drop}},
		{name: "shape-checks", after: []string{drop}},
		{name: "empty-trigger", after: []string{drop, strings.TrimSuffix(head, "SELECT CASE") + "SELECT 1;\nEND;"}},
		{name: "owner-only", after: []string{drop, rules(br[0])}},
		{name: "owner+json_valid", after: []string{drop, rules(br[0], br[1], br[2])}},
		{name: "headers-only", after: []string{drop, rules(br[1:]...)}},
		{name: "prev-row-skip", after: []string{drop, rules(strings.Replace(br[0], "AND NOT EXISTS", previousRowSkip+" AND NOT EXISTS", 1), br[1], br[2], br[3], br[4])}},
		{name: "text-test", after: []string{drop, rules(br[0], br[1], br[2], headersTextTest, br[3], br[4])}},
		// An AFTER trigger would run after the CHECKs, changing which
		// message some rows get (invalid headers get the CHECK's):
		// measured only.
		{name: "after-trigger", after: []string{drop, strings.Replace(v3, "BEFORE INSERT", "AFTER INSERT", 1)}},
		{name: "newest"},
	}
	kinds := []struct {
		name       string
		rows, runs int
	}{{"go-1", 1, 2000}, {"go-100", 100, 40}, {"sql-1", 1, 2000}, {"sql-2000", 2000, 2}}
	rounds := 7
	if s := os.Getenv("MENSAGERIA_BENCH_ROUNDS"); s != "" {
		if rounds, err = strconv.Atoi(s); err != nil || rounds < 1 {
			b.Fatalf("MENSAGERIA_BENCH_ROUNDS=%q: want a positive number", s)
		}
	}

	type target struct {
		d     *sqlite.Driver
		stmts map[int]*sql.Stmt
	}
	targets := make([]target, len(variants))
	headers := []byte(`{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","x-request-id":"req-1"}`)
	payload := []byte(`{"id":1,"total":"12.50","items":[{"sku":"a","qty":2}]}`)
	for i, v := range variants {
		d, err := sqlite.Open(filepath.Join(b.TempDir(), v.name+".db"), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		ms, err := d.MigrationSQL(0)
		if err != nil {
			b.Fatal(err)
		}
		if v.upTo > 0 {
			ms = ms[:v.upTo]
		}
		for _, m := range ms {
			text := m.SQL
			if v.edit != nil {
				text = v.edit(m.Version, text)
			}
			if _, err := d.DB().ExecContext(ctx, text); err != nil {
				b.Fatalf("%s: migration %d: %v", v.name, m.Version, err)
			}
		}
		for _, s := range v.after {
			if _, err := d.DB().ExecContext(ctx, s); err != nil {
				b.Fatalf("%s: %s: %v", v.name, s, err)
			}
		}
		if v.edit != nil {
			// The edit matched, or the variant would measure the CHECKs it
			// claims to leave out.
			var table string
			if err := d.DB().QueryRowContext(ctx, "SELECT sql FROM sqlite_master WHERE name = 'mensageria_outbox'").Scan(&table); err != nil {
				b.Fatal(err)
			}
			if strings.Contains(table, `"mensageria: the key`) || strings.Contains(table, `"mensageria: the message type`) {
				b.Fatalf("%s: the outbox still has the type and key CHECKs:\n%s", v.name, table)
			}
		}
		if v.upTo == 0 || v.upTo >= 3 {
			// An app of a dozen types, as a relay registers them.
			rs := []driver.Resource{{Kind: driver.ResourceType, Name: "order.created"}}
			for j := range 11 {
				rs = append(rs, driver.Resource{Kind: driver.ResourceType, Name: fmt.Sprintf("order.event-%d", j)})
			}
			if _, err := d.Register(ctx, driver.RegisterParams{App: "bench", Resources: rs}); err != nil {
				b.Fatal(err)
			}
		}
		st, err := d.DB().PrepareContext(ctx, "INSERT INTO mensageria_outbox (type, key, payload, headers) VALUES ('order.created', ?, ?, ?)")
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		targets[i] = target{d: d, stmts: map[int]*sql.Stmt{1: st}}
	}

	// One statement of 2000 rows: what each part costs a row, with no
	// per-statement cost around it.
	bulk := `WITH RECURSIVE n(j) AS (SELECT 1 UNION ALL SELECT j + 1 FROM n WHERE j < 2000)
		INSERT INTO mensageria_outbox (type, key, payload, headers) SELECT 'order.created', 'order-' || ?1 || '-' || ?2 || '-' || j, ?3, ?4 FROM n`
	run := func(t target, kind string, rows, runs, round int) time.Duration {
		if _, err := t.d.DB().ExecContext(ctx, "DELETE FROM mensageria_outbox"); err != nil {
			b.Fatal(err)
		}
		batch := make([]driver.InsertRow, rows)
		start := cpuTime(b)
		for i := range runs {
			switch kind {
			case "sql-2000":
				if _, err := t.d.DB().ExecContext(ctx, bulk, round, i, string(payload), string(headers)); err != nil {
					b.Fatal(err)
				}
			case "sql-1":
				if _, err := t.stmts[1].ExecContext(ctx, fmt.Sprint("order-", round, "-", i), string(payload), string(headers)); err != nil {
					b.Fatal(err)
				}
			default:
				for j := range batch {
					batch[j] = driver.InsertRow{MessageID: uuid.New(), Type: "order.created", Key: fmt.Sprint("order-", round, "-", i, "-", j), Payload: payload, Headers: headers}
				}
				if err := t.d.Insert(ctx, driver.InsertParams{Rows: batch}); err != nil {
					b.Fatal(err)
				}
			}
		}
		return (cpuTime(b) - start) / time.Duration(rows*runs)
	}

	perRow := map[string][][]time.Duration{} // kind → variant → rounds
	for _, k := range kinds {
		perRow[k.name] = make([][]time.Duration, len(variants))
		for i := range variants { // warm: statements prepared, pages cached
			run(targets[i], k.name, k.rows, max(1, k.runs/10), -1)
		}
	}
	b.ResetTimer()
	for r := range rounds {
		for _, k := range kinds {
			for o := range variants {
				i := (o + r) % len(variants)
				perRow[k.name][i] = append(perRow[k.name][i], run(targets[i], k.name, k.rows, k.runs, r))
			}
		}
	}
	b.StopTimer()
	median := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	// A table: one line a variant, CPU µs per row and ratio to before for
	// each kind.
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-17s", "CPU µs/row, ratio")
	for _, k := range kinds {
		fmt.Fprintf(&table, " | %-13s", k.name)
	}
	for i, v := range variants {
		fmt.Fprintf(&table, "\n%-17s", v.name)
		for _, k := range kinds {
			base := perRow[k.name][0]
			us := make([]float64, rounds)
			ratios := make([]float64, rounds)
			for r, c := range perRow[k.name][i] {
				us[r] = float64(c) / float64(time.Microsecond)
				ratios[r] = float64(base[r]) / float64(c)
			}
			b.ReportMetric(median(us), k.name+"/"+v.name+"/cpu-µs/row")
			b.ReportMetric(median(ratios), k.name+"/"+v.name+"/ratio")
			fmt.Fprintf(&table, " | %5.1f  %5.2f ", median(us), median(ratios))
		}
	}
	// Printed rather than logged: the benchmark log keeps ten lines.
	fmt.Println(table.String())
}
