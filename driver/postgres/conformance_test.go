package postgres_test

import (
	"context"
	"testing"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/drivertest"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

func harness(t *testing.T, migrate bool) *drivertest.Harness {
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	open := func(t *testing.T) driver.Driver {
		d, err := postgres.New(pool, &postgres.Config{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := open(t)
	if migrate {
		if _, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
			t.Fatal(err)
		}
	}
	return &drivertest.Harness{
		Driver: d,
		Reopen: open,
		Begin: func(ctx context.Context) (any, func() error, func() error, error) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				return nil, nil, nil, err
			}
			return tx, func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }, nil
		},
		Exec: func(ctx context.Context, q string, args ...any) error {
			_, err := pool.Exec(ctx, q, args...)
			return err
		},
		Table: func(name string) string { return schema + "." + name },
		Count: func(ctx context.Context, q string, args ...any) (int64, error) {
			var n int64
			err := pool.QueryRow(ctx, q, args...).Scan(&n)
			return n, err
		},
		Unmigrated: func(t *testing.T) *drivertest.Harness { return harness(t, false) },
		Unreadable: func(typ string) ([]string, []drivertest.UnreadableRow) {
			o := schema + ".outbox"
			var stmts []string
			for _, c := range []string{"created_at", "available_at", "lease_until", "attempted_at"} {
				stmts = append(stmts, "ALTER TABLE "+o+" DROP CONSTRAINT outbox_"+c+"_readable")
			}
			stmts = append(stmts,
				"INSERT INTO "+o+" (type, key, created_at) VALUES ('"+typ+"', 'u-created', '-infinity')",
				"INSERT INTO "+o+" (type, key, available_at) VALUES ('"+typ+"', 'u-available', '-infinity')")
			return stmts, []drivertest.UnreadableRow{{Key: "u-created", Column: "created_at"}, {Key: "u-available", Column: "available_at"}}
		},
		CatalogVersion: 2,
	}
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) *drivertest.Harness { return harness(t, true) })
}
