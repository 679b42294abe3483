package sqlite_test

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
	"github.com/xadm/mensageria/internal/testdb"
)

func count(t *testing.T, d *sqlite.Driver) int {
	t.Helper()
	var n int
	if err := d.DB().QueryRow("SELECT count(*) FROM mensageria_outbox").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A Go enqueue of a type nobody owns fails with the type named, whichever
// row of the call has it, and writes nothing of the call.
func TestInsertOfUnownedTypeIsTyped(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	ctx := t.Context()
	own(t, d, "a", "owned")
	var rows []driver.InsertRow
	for range 250 { // past one statement's chunk of rows
		rows = append(rows, driver.InsertRow{MessageID: uuid.New(), Type: "owned", Key: "k", Payload: []byte(`{}`)})
	}
	rows = append(rows, driver.InsertRow{MessageID: uuid.New(), Type: "ghost", Key: "k", Payload: []byte(`{}`)})
	err := d.Insert(ctx, driver.InsertParams{Rows: rows})
	var ue *driver.UnownedTypeError
	if !errors.As(err, &ue) || !errors.Is(err, driver.ErrUnownedType) || ue.Type != "ghost" {
		t.Fatalf("Insert with an unowned type = %v, want an *UnownedTypeError naming ghost", err)
	}
	if n := count(t, d); n != 0 {
		t.Fatalf("%d rows written by a refused Insert", n)
	}
	// In the caller's transaction: refused, nothing of the call written,
	// and the transaction goes on.
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := d.InsertTx(ctx, tx, driver.InsertParams{Rows: rows[249:]}); !errors.As(err, &ue) || ue.Type != "ghost" {
		t.Fatalf("InsertTx with an unowned type = %v", err)
	}
	if err := d.InsertTx(ctx, tx, driver.InsertParams{Rows: rows[:1]}); err != nil {
		t.Fatalf("InsertTx after a refusal: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, d); n != 1 {
		t.Fatalf("%d rows after the transaction, want the one owned row of the second call", n)
	}
}

// ruleCases are rows the outbox refuses, by the same rules for a plain SQL
// INSERT and a Go enqueue. Lengths are bytes of UTF-8: 334 euro signs are
// 334 characters and 1002 bytes.
var ruleCases = []struct {
	name     string
	typ, key string
	headers  any    // nil, or the JSON text
	payload  string // "" for {}
	want     string
}{
	{name: "unowned type", typ: "ghost", key: "k", want: "has no owner app"},
	{name: "type over 200 bytes", typ: strings.Repeat("t", 201), key: "k", want: "longer than 200 bytes"},
	{name: "empty key", typ: "owned", key: "", want: "the key is empty"},
	{name: "key over 1000 bytes", typ: "owned", key: strings.Repeat("k", 1001), want: "longer than 1000 bytes"},
	{name: "key over 1000 bytes in fewer characters", typ: "owned", key: strings.Repeat("€", 334), want: "longer than 1000 bytes"},
	{name: "key with NUL", typ: "owned", key: "a\x00b", want: "NUL"},
	{name: "number header", typ: "owned", key: "k", headers: `{"n":1}`, want: "string value"},
	{name: "null header", typ: "owned", key: "k", headers: `{"n":null}`, want: "string value"},
	{name: "nameless header", typ: "owned", key: "k", headers: `{"":"v"}`, want: "non-empty name"},
	{name: "headers not an object", typ: "owned", key: "k", headers: `["a"]`, want: "not a JSON object"},
	{name: "headers not JSON", typ: "owned", key: "k", headers: `{a`, want: "not valid JSON"},
	{name: "payload not JSON", typ: "owned", key: "k", payload: `{a`, want: "payload is not a valid JSON document"},
}

func TestEnqueueRulesSameForSQLAndGo(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	ctx := t.Context()
	own(t, d, "a", "owned")
	for _, c := range ruleCases {
		payload := cmp.Or(c.payload, "{}")
		_, err := d.DB().ExecContext(ctx, "INSERT INTO mensageria_outbox (type, key, payload, headers) VALUES (?, ?, ?, ?)", c.typ, c.key, payload, c.headers)
		if err == nil || !strings.Contains(err.Error(), "mensageria: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: plain SQL insert = %v, want the outbox's refusal saying %q", c.name, err, c.want)
		}
		var h []byte
		if s, ok := c.headers.(string); ok {
			h = []byte(s)
		}
		err = d.Insert(ctx, driver.InsertParams{Rows: []driver.InsertRow{{MessageID: uuid.New(), Type: c.typ, Key: c.key, Payload: []byte(payload), Headers: h}}})
		var ue *driver.UnownedTypeError
		var re *sqlite.RefusedError
		switch {
		case c.want == "has no owner app":
			if !errors.As(err, &ue) {
				t.Errorf("%s: Insert = %v, want an *UnownedTypeError", c.name, err)
			}
		case !errors.As(err, &re) || !strings.HasPrefix(re.Reason, "mensageria: ") || !strings.Contains(re.Reason, c.want):
			t.Errorf("%s: Insert = %v, want a *RefusedError saying %q", c.name, err, c.want)
		}
	}
	if n := count(t, d); n != 0 {
		t.Fatalf("%d refused rows were written", n)
	}
	// The limits themselves are allowed: 1000 bytes of key (500 two-byte
	// characters), 200 of type, string headers.
	long := strings.Repeat("t", 200)
	own(t, d, "a", long)
	for _, q := range [][]any{
		{"INSERT INTO mensageria_outbox (type, key) VALUES ('owned', ?)", strings.Repeat("é", 500)},
		{"INSERT INTO mensageria_outbox (type, key, headers) VALUES (?, 'k', ?)", long, `{"x-request-id":"r1","traceparent":"00-1"}`},
	} {
		if _, err := d.DB().ExecContext(ctx, q[0].(string), q[1:]...); err != nil {
			t.Fatalf("%s: %v", q[0], err)
		}
	}
}

// A bad row after good ones in the same statement is refused with its own
// message, and the good rows before it are not written either: whatever a
// statement has learnt from its earlier rows (the same type, headers of
// the same shape) never lets a later one through. Each refused row is
// preceded by rows of the same type and of headers close to its own.
func TestBadRowAfterGoodOnesInOneStatement(t *testing.T) {
	d := migrated(t, filepath.Join(t.TempDir(), "m.db"), nil)
	ctx := t.Context()
	own(t, d, "a", "owned")
	const good = 5
	goodHeaders := []string{`{"n":"1"}`, `{"x-request-id":"r1"}`, `{"a":"b:c","d":"e"}`, `{"n":"1"}`, `{"n":""}`}
	// Rows that pass when alone, but would slip through a check that
	// trusted a previous row's type or the look of its headers.
	cases := append(slices.Clone(ruleCases), []struct {
		name     string
		typ, key string
		headers  any
		payload  string
		want     string
	}{
		{name: "number header after string ones", typ: "owned", key: "k", headers: `{"n":"1","m":2}`, want: "string value"},
		{name: "object header", typ: "owned", key: "k", headers: `{"n":{"m":"1"}}`, want: "string value"},
		{name: "array header", typ: "owned", key: "k", headers: `{"n":["1"]}`, want: "string value"},
		{name: "nameless header after named ones", typ: "owned", key: "k", headers: `{"n":"1","":"2"}`, want: "non-empty name"},
		{name: "header after a space", typ: "owned", key: "k", headers: `{"n": 1}`, want: "string value"},
		{name: "headers a string", typ: "owned", key: "k", headers: `"{\"n\":\"1\"}"`, want: "not a JSON object"},
		{name: "headers truncated", typ: "owned", key: "k", headers: `{"n":"1"`, want: "not valid JSON"},
		{name: "headers with trailing text", typ: "owned", key: "k", headers: `{"n":"1"}x`, want: "not valid JSON"},
		{name: "JSON5 headers", typ: "owned", key: "k", headers: `{n:'1'}`, want: "not valid JSON"},
	}...)
	for _, c := range cases {
		payload := cmp.Or(c.payload, "{}")
		// Plain SQL: one multi-row INSERT.
		var args []any
		for i := range good {
			args = append(args, "owned", fmt.Sprint("good-", i), "{}", goodHeaders[i])
		}
		args = append(args, c.typ, c.key, payload, c.headers)
		q := "INSERT INTO mensageria_outbox (type, key, payload, headers) VALUES " + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?), ", good+1), ", ")
		_, err := d.DB().ExecContext(ctx, q, args...)
		if err == nil || !strings.Contains(err.Error(), "mensageria: ") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s after %d good rows: plain SQL insert = %v, want the outbox's refusal saying %q", c.name, good, err, c.want)
		}
		// Go: one Insert, one statement (fewer rows than a chunk).
		var rows []driver.InsertRow
		for i := range good {
			rows = append(rows, driver.InsertRow{MessageID: uuid.New(), Type: "owned", Key: fmt.Sprint("good-", i), Payload: []byte(`{}`), Headers: []byte(goodHeaders[i])})
		}
		var h []byte
		if s, ok := c.headers.(string); ok {
			h = []byte(s)
		}
		rows = append(rows, driver.InsertRow{MessageID: uuid.New(), Type: c.typ, Key: c.key, Payload: []byte(payload), Headers: h})
		err = d.Insert(ctx, driver.InsertParams{Rows: rows})
		var ue *driver.UnownedTypeError
		var re *sqlite.RefusedError
		switch {
		case c.want == "has no owner app":
			if !errors.As(err, &ue) || ue.Type != c.typ {
				t.Errorf("%s after %d good rows: Insert = %v, want an *UnownedTypeError naming %q", c.name, good, err, c.typ)
			}
		case !errors.As(err, &re) || !strings.HasPrefix(re.Reason, "mensageria: ") || !strings.Contains(re.Reason, c.want):
			t.Errorf("%s after %d good rows: Insert = %v, want a *RefusedError saying %q", c.name, good, err, c.want)
		}
		if n := count(t, d); n != 0 {
			t.Fatalf("%s: %d rows written by refused statements", c.name, n)
		}
	}
	// The good rows alone are written, by both paths.
	var rows []driver.InsertRow
	for i := range good {
		rows = append(rows, driver.InsertRow{MessageID: uuid.New(), Type: "owned", Key: fmt.Sprint("good-", i), Payload: []byte(`{}`), Headers: []byte(goodHeaders[i])})
		if _, err := d.DB().ExecContext(ctx, "INSERT INTO mensageria_outbox (type, key, headers) VALUES ('owned', ?, ?)", fmt.Sprint("sql-", i), goodHeaders[i]); err != nil {
			t.Fatalf("good row %d by plain SQL: %v", i, err)
		}
	}
	if err := d.Insert(ctx, driver.InsertParams{Rows: rows}); err != nil {
		t.Fatalf("the good rows alone: %v", err)
	}
	if n := count(t, d); n != 2*good {
		t.Fatalf("%d rows, want the %d good ones", n, 2*good)
	}
}

// tool finds a program the black-box tests run. On CI a missing one is a
// failure: scripts/services.sh installs it.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		testdb.Unavailable(t, name+" (scripts/services.sh installs it)", err)
	}
	return p
}

// pythonInsert runs each statement in its own transaction through
// Python's sqlite3 module, and reports the library's version and each
// statement's error ("" for none).
const pythonInsert = `
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=10)
out = {"version": sqlite3.sqlite_version, "errors": []}
for stmt in json.load(sys.stdin):
    try:
        with db:
            db.execute(stmt)
        out["errors"].append("")
    except sqlite3.Error as e:
        out["errors"].append(type(e).__name__ + ": " + str(e))
print(json.dumps(out))
`

// Programs that are not this library, on the SQLite their platform ships
// (3.40 on Debian 12), enqueue with a plain INSERT into a migrated file:
// every default is filled, the relay delivers the rows, and the outbox's
// rules refuse the same rows for them as for Go.
func TestPlainInsertFromOtherPrograms(t *testing.T) {
	python, shell := tool(t, "python3"), tool(t, "sqlite3")
	path := filepath.Join(t.TempDir(), "m.db")
	d := migrated(t, path, nil)
	ctx := t.Context()
	own(t, d, "shop", "order.created")
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	insert := func(typ, key, headers string) string {
		if headers == "" {
			return "INSERT INTO mensageria_outbox (type, key, payload) VALUES (" + quote(typ) + ", " + quote(key) + `, '{"n":1}')`
		}
		return "INSERT INTO mensageria_outbox (type, key, payload, headers) VALUES (" + quote(typ) + ", " + quote(key) + `, '{"n":1}', ` + quote(headers) + ")"
	}
	refused := []struct{ stmt, want string }{
		{insert("nobody.owns", "k", ""), "has no owner app"},
		{insert("order.created", strings.Repeat("k", 1001), ""), "longer than 1000 bytes"},
		{insert("order.created", strings.Repeat("€", 334), ""), "longer than 1000 bytes"},
		{insert("order.created", "k", `{"n":1}`), "string value"},
		{insert("order.created", "k", `{"ok":"v","flag":true}`), "string value"},
	}

	// Python.
	stmts := []string{insert("order.created", "from-python", "")}
	for _, r := range refused {
		stmts = append(stmts, r.stmt)
	}
	in, _ := json.Marshal(stmts)
	cmd := exec.CommandContext(ctx, python, "-c", pythonInsert, path)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	outb, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v\n%s", err, stderr.String())
	}
	var py struct {
		Version string
		Errors  []string
	}
	if err := json.Unmarshal(outb, &py); err != nil || len(py.Errors) != len(stmts) {
		t.Fatalf("python3 said %s (%v)", outb, err)
	}
	t.Logf("Python's sqlite3 runs SQLite %s", py.Version)
	if py.Errors[0] != "" {
		t.Fatalf("plain INSERT from Python (SQLite %s): %s", py.Version, py.Errors[0])
	}
	for i, r := range refused {
		if got := py.Errors[i+1]; !strings.HasPrefix(got, "IntegrityError: ") || !strings.Contains(got, "mensageria: ") || !strings.Contains(got, r.want) {
			t.Errorf("Python, %.60s…: %q, want an IntegrityError saying %q", r.stmt, got, r.want)
		}
	}

	// The sqlite3 shell.
	sh := func(stmt string) (string, error) {
		cmd := exec.CommandContext(ctx, shell, "-bail", "-cmd", ".timeout 10000", path, stmt)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := sh("SELECT sqlite_version()"); err != nil {
		t.Fatalf("sqlite3: %v: %s", err, out)
	} else {
		t.Logf("the sqlite3 shell runs SQLite %s", strings.TrimSpace(out))
	}
	if out, err := sh(insert("order.created", "from-shell", "")); err != nil {
		t.Fatalf("plain INSERT from the sqlite3 shell: %v: %s", err, out)
	}
	for _, r := range refused {
		out, err := sh(r.stmt)
		if err == nil || !strings.Contains(out, "mensageria: ") || !strings.Contains(out, r.want) {
			t.Errorf("sqlite3 shell, %.60s…: %v: %q, want a failure saying %q", r.stmt, err, out, r.want)
		}
	}

	// Exactly the two good rows, every default filled from the database.
	jobs, err := d.ListMessages(ctx, driver.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 {
		t.Fatalf("%d rows in the outbox, want the two good inserts", len(jobs))
	}
	for _, j := range jobs {
		if u := uuid.UUID(j.MessageID); u.Version() != 4 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("row %s: message id %s is not a random UUID", j.Key, u)
		}
		if j.State != driver.StatePending || j.Attempt != 0 || j.Headers != nil || j.Owner != "shop" || string(j.Payload) != `{"n":1}` {
			t.Fatalf("row %s = %+v", j.Key, j)
		}
		for what, at := range map[string]time.Time{"created_at": j.CreatedAt, "available_at": j.AvailableAt} {
			if d := time.Since(at); d < -time.Minute || d > time.Minute {
				t.Fatalf("row %s: %s %s is not now", j.Key, what, at)
			}
		}
	}

	// A relay delivers them.
	got := make(chan string, 2)
	reg := mensageria.NewRegistry().MustRegister("order.created", mensageria.SenderFunc(func(_ context.Context, m *mensageria.Delivery) error {
		got <- m.Key
		return nil
	}))
	c, err := mensageria.New(d, &mensageria.Config{App: "shop", Registry: reg, PollInterval: 50 * time.Millisecond, Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Stop(context.Background()) }()
	delivered := map[string]bool{}
	for len(delivered) < 2 {
		select {
		case k := <-got:
			delivered[k] = true
		case <-time.After(10 * time.Second): // a bound for a hang, not a speed target
			t.Fatalf("delivered %v of the plain INSERTs", delivered)
		}
	}
	if !delivered["from-python"] || !delivered["from-shell"] {
		t.Fatalf("delivered %v", delivered)
	}
}

// The version table an external tool fills gets its time from the SQL
// itself, so applying MigrationSQL with an older sqlite3 works.
func TestMigrationSQLByTheSQLiteShell(t *testing.T) {
	shell := tool(t, "sqlite3")
	path := filepath.Join(t.TempDir(), "m.db")
	d := openT(t, path, nil)
	ms, err := d.MigrationSQL(0)
	if err != nil {
		t.Fatal(err)
	}
	var script strings.Builder
	for _, m := range ms {
		script.WriteString("BEGIN;\n" + m.SQL + "COMMIT;\n")
	}
	cmd := exec.CommandContext(t.Context(), shell, "-bail", path)
	cmd.Stdin = strings.NewReader(script.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("sqlite3 applying MigrationSQL(0): %v: %s", err, out)
	}
	res, err := d.Migrate(t.Context(), driver.MigrateParams{Mode: driver.MigrateCheck})
	if err != nil || res.To != len(ms) {
		t.Fatalf("check after the shell applied the migrations = %+v, %v", res, err)
	}
	var applied sql.NullInt64
	if err := d.DB().QueryRow("SELECT min(applied_at) FROM mensageria_migrations").Scan(&applied); err != nil || !applied.Valid {
		t.Fatalf("applied_at %v, %v", applied, err)
	}
	if at := time.UnixMicro(applied.Int64); time.Since(at) > time.Minute || time.Since(at) < -time.Minute {
		t.Fatalf("applied_at %s is not now", at)
	}
}

// A caller's *sql.DB with one connection, as SQLite users often configure
// it: enqueues on their own and inside the caller's transaction never wait
// for a second connection (the prepared INSERTs are made where none is
// held).
func TestEnqueueOnAPoolOfOne(t *testing.T) {
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "m.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	d, err := sqlite.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second) // a bound for a hang
	defer cancel()
	if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	own(t, d, "a", "t")
	rows := func(n int) []driver.InsertRow {
		var rs []driver.InsertRow
		for range n {
			rs = append(rs, driver.InsertRow{MessageID: uuid.New(), Type: "t", Key: "k", Payload: []byte(`{}`)})
		}
		return rs
	}
	// In the caller's transaction first, with a full chunk no statement
	// was prepared for yet.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 3, 9, 200} {
		if err := d.InsertTx(ctx, tx, driver.InsertParams{Rows: rows(n)}); err != nil {
			t.Fatalf("InsertTx of %d rows: %v", n, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 9, 250} {
		if err := d.Insert(ctx, driver.InsertParams{Rows: rows(n)}); err != nil {
			t.Fatalf("Insert of %d rows: %v", n, err)
		}
	}
	if n := count(t, d); n != 1+3+9+200+1+9+250 {
		t.Fatalf("%d rows, want every one enqueued", n)
	}
}
