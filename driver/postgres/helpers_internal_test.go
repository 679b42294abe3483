package postgres

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testdb"
)

// migratedDriver is a driver on a schema of the test's own, migrated up.
func migratedDriver(t *testing.T) (context.Context, *pgxpool.Pool, *Driver) {
	t.Helper()
	ctx := context.Background()
	pool := testdb.Pool(t)
	d, err := New(pool, &Config{Schema: testdb.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	return ctx, pool, d
}

// execer runs a statement of the test's set-up, failing the test on an error.
func execer(t *testing.T, ctx context.Context, pool *pgxpool.Pool) func(sql string, args ...any) {
	return func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}
