package mensageria_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlite"
)

// sqliteBackend is a fresh database file per test; every driver opened on
// it is another connection pool, like another process.
func sqliteBackend(t *testing.T) *backend {
	path := filepath.Join(t.TempDir(), "m.db")
	ctx := context.Background()
	open := func() driver.Driver {
		d, err := sqlite.Open(path, &sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return d
	}
	first := open().(*sqlite.Driver)
	if _, err := first.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	db := first.DB()
	return &backend{
		name: "sqlite",
		open: open,
		exec: func(q string, args ...any) error { _, err := db.ExecContext(ctx, q, args...); return err },
		count: func(q string, args ...any) int {
			var n int
			if err := db.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			return n
		},
		table: func(s string) string { return "mensageria_" + s },
		execTx: func(tx mensageria.Tx, q string, args ...any) error {
			_, err := tx.Raw().(*sql.Tx).ExecContext(ctx, q, args...)
			return err
		},
		begin: func() (any, func() error, func() error) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			return tx, tx.Commit, tx.Rollback
		},
	}
}

// On SQLite the caller's transaction holds the database's write lock, so
// an app whose ownership was never recorded cannot record it from inside
// EnqueueTx: the call fails saying what to do, writes nothing, and leaves
// the transaction usable. After Register it works.
func TestSQLiteEnqueueTxBeforeAnyRegistrationSaysWhatToDo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	// A short busy timeout, so the blocked registration gives up quickly.
	db, err := sql.Open("sqlite", path+"?_txlock=immediate&_pragma=busy_timeout(200)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	drv, err := sqlite.New(db, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, drv, fastConfig(uniqueApp("sqlitetx"), mensageria.NewRegistry().MustRegister("t", &recorder{})))
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.EnqueueTx(ctx, tx, mensageria.Message{Type: "t", Key: "k"})
	if err == nil || !strings.Contains(err.Error(), "call Client.Register before opening it") {
		t.Fatalf("EnqueueTx before any registration: %v", err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1"); err != nil {
		t.Fatalf("the caller's transaction is no longer usable: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Register(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueTx(ctx, tx, mensageria.Message{Type: "t", Key: "k"}); err != nil {
		t.Fatalf("EnqueueTx after Register: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM mensageria_outbox").Scan(&n); err != nil || n != 1 {
		t.Fatalf("outbox rows: %d %v; want the one enqueued after Register", n, err)
	}
}
