package clienttest_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
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
		insertID: func(q string) (id int64, err error) {
			return id, db.QueryRowContext(ctx, q+" RETURNING id").Scan(&id)
		},
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
// the first EnqueueTx of an app whose ownership was never recorded records
// it inside that transaction: rolled back, nothing is owned; committed, the
// row and the ownership land together. Another app's type is refused and
// the transaction stays usable.
func TestSQLiteFirstEnqueueTxRecordsOwnershipInTheCallersTransaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	// A short busy timeout: a registration that waited for the caller's
	// own write lock would fail quickly instead of passing slowly.
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
	app := uniqueApp("sqlitetx")
	c := newClient(t, drv, fastConfig(app, mensageria.NewRegistry().MustRegister("t", &recorder{})))
	rows := func() int {
		var n int
		if err := db.QueryRowContext(ctx, "SELECT count(*) FROM mensageria_outbox").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	owner := func() string {
		list, err := drv.Owners(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range list {
			if o.Kind == driver.ResourceType && o.Name == "t" {
				return o.App
			}
		}
		return ""
	}
	enqueueIn := func(c *mensageria.Client, commit bool) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.EnqueueTx(ctx, tx, mensageria.Message{Type: "t", Key: "k"})
		if _, xerr := tx.ExecContext(ctx, "SELECT 1"); xerr != nil {
			t.Fatalf("the caller's transaction is no longer usable: %v", xerr)
		}
		if commit && err == nil {
			if cerr := tx.Commit(); cerr != nil {
				t.Fatal(cerr)
			}
		} else if rerr := tx.Rollback(); rerr != nil {
			t.Fatal(rerr)
		}
		return err
	}
	if err := enqueueIn(c, false); err != nil {
		t.Fatalf("first EnqueueTx: %v", err)
	}
	if n, o := rows(), owner(); n != 0 || o != "" {
		t.Fatalf("after a rollback: %d rows, type owned by %q; want nothing of either", n, o)
	}
	if err := enqueueIn(c, true); err != nil {
		t.Fatalf("EnqueueTx after the rollback: %v", err)
	}
	if n, o := rows(), owner(); n != 1 || o != app {
		t.Fatalf("after a commit: %d rows, type owned by %q; want 1 and %q", n, o, app)
	}
	if err := enqueueIn(c, true); err != nil || rows() != 2 {
		t.Fatalf("a later EnqueueTx: %v, %d rows", err, rows())
	}
	intruder := newClient(t, drv, fastConfig(uniqueApp("intruder"), mensageria.NewRegistry().MustRegister("t", &recorder{})))
	if err := enqueueIn(intruder, true); !errors.Is(err, mensageria.ErrOwnerConflict) {
		t.Fatalf("another app's EnqueueTx of the type = %v, want an ownership conflict", err)
	}
	if n := rows(); n != 2 {
		t.Fatalf("%d rows after the refused enqueue, want 2", n)
	}
}
