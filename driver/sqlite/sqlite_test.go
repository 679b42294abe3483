package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/drivertest"
	"github.com/xadm/mensageria/driver/sqlite"
)

func openT(t *testing.T, path string, cfg *sqlite.Config) *sqlite.Driver {
	t.Helper()
	d, err := sqlite.Open(path, cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

func harness(t *testing.T, migrate bool) *drivertest.Harness {
	path := filepath.Join(t.TempDir(), "m.db")
	d := openT(t, path, nil)
	if migrate {
		if _, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	return &drivertest.Harness{
		Driver: d,
		Reopen: func(t *testing.T) driver.Driver { return openT(t, path, nil) },
		Begin: func(ctx context.Context) (any, func() error, func() error, error) {
			tx, err := d.DB().BeginTx(ctx, nil)
			if err != nil {
				return nil, nil, nil, err
			}
			return tx, tx.Commit, tx.Rollback, nil
		},
		Exec: func(ctx context.Context, q string, args ...any) error {
			_, err := d.DB().ExecContext(ctx, q, args...)
			return err
		},
		Table: d.Table,
		Count: func(ctx context.Context, q string, args ...any) (int64, error) {
			var n int64
			err := d.DB().QueryRowContext(ctx, q, args...).Scan(&n)
			return n, err
		},
		Unmigrated: func(t *testing.T) *drivertest.Harness { return harness(t, false) },
		Unreadable: func(typ string) ([]string, []drivertest.UnreadableRow) {
			o := d.Table("outbox")
			return []string{
					"DROP TRIGGER " + d.Table("outbox_enqueue_readable"),
					"INSERT INTO " + o + " (type, key, message_id) VALUES ('" + typ + "', 'u-id', 'order-0001-created-by-java-app-00001')",
					"INSERT INTO " + o + " (type, key, created_at) VALUES ('" + typ + "', 'u-created', 'yesterday')",
				}, []drivertest.UnreadableRow{
					{Key: "u-id", Column: "message_id"}, {Key: "u-created", Column: "created_at"},
				}
		},
		CatalogVersion: 3,
	}
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) *drivertest.Harness { return harness(t, true) })
}
