package mensageria_test

import (
	"context"
	"database/sql"
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
