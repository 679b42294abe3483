package sqlkit_test

import (
	"database/sql"
	sqldriver "database/sql/driver"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeDB is a database/sql database whose statements answer from a table
// the test gives: a query's rows by its text, and a log of every statement
// with its arguments. It stands in for a database in tests of what sqlkit
// does with rows and statements, not of any SQL.
type fakeDB struct {
	mu       sync.Mutex
	results  map[string]fakeResult
	affected int64 // what every Exec reports
	log      []string
}

type fakeResult struct {
	cols []string
	rows [][]sqldriver.Value
	err  error // the query's error
}

var fakeN atomic.Int64

// openFake returns a *sql.DB answering from f.
func openFake(t *testing.T, f *fakeDB) *sql.DB {
	t.Helper()
	name := fmt.Sprintf("sqlkitfake%d", fakeN.Add(1))
	sql.Register(name, fakeDriver{f})
	db, err := sql.Open(name, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func (f *fakeDB) record(q string, args []sqldriver.Value) {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := []string{q}
	for _, a := range args {
		parts = append(parts, fmt.Sprint(a))
	}
	f.log = append(f.log, strings.Join(parts, " | "))
}

func (f *fakeDB) statements() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.log...)
}

type fakeDriver struct{ f *fakeDB }

func (d fakeDriver) Open(string) (sqldriver.Conn, error) { return fakeConn(d), nil }

type fakeConn struct{ f *fakeDB }

func (c fakeConn) Prepare(q string) (sqldriver.Stmt, error) { return fakeStmt{c.f, q}, nil }
func (c fakeConn) Close() error                             { return nil }
func (c fakeConn) Begin() (sqldriver.Tx, error)             { return fakeTx{}, nil }

type fakeTx struct{}

func (fakeTx) Commit() error   { return nil }
func (fakeTx) Rollback() error { return nil }

type fakeStmt struct {
	f *fakeDB
	q string
}

func (s fakeStmt) Close() error  { return nil }
func (s fakeStmt) NumInput() int { return -1 }

func (s fakeStmt) Exec(args []sqldriver.Value) (sqldriver.Result, error) {
	s.f.record(s.q, args)
	return sqldriver.RowsAffected(s.f.affected), nil
}

func (s fakeStmt) Query(args []sqldriver.Value) (sqldriver.Rows, error) {
	s.f.record(s.q, args)
	s.f.mu.Lock()
	r, ok := s.f.results[s.q]
	s.f.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("fake: no result for %q", s.q)
	}
	if r.err != nil {
		return nil, r.err
	}
	return &fakeRows{cols: r.cols, rows: r.rows}, nil
}

type fakeRows struct {
	cols []string
	rows [][]sqldriver.Value
}

func (r *fakeRows) Columns() []string { return r.cols }
func (r *fakeRows) Close() error      { return nil }

func (r *fakeRows) Next(dest []sqldriver.Value) error {
	if len(r.rows) == 0 {
		return io.EOF
	}
	copy(dest, r.rows[0])
	r.rows = r.rows[1:]
	return nil
}
