package mysql_test

import (
	"context"
	"strings"
	"testing"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/drivertest"
	"github.com/xadm/mensageria/driver/mysql"
	"github.com/xadm/mensageria/driver/mysql/mysqltest"
)

func openT(t testing.TB, url string, cfg *mysql.Config) *mysql.Driver {
	t.Helper()
	d, err := mysql.Open(url, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// migrated opens a fresh database of its own, migrated.
func migrated(t testing.TB) (*mysql.Driver, string) {
	t.Helper()
	url := mysqltest.Database(t)
	d := openT(t, url, nil)
	if _, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return d, url
}

func harness(t *testing.T, migrate bool) *drivertest.Harness {
	url := mysqltest.Database(t)
	d := openT(t, url, nil)
	if migrate {
		if _, err := d.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	return &drivertest.Harness{
		Driver: d,
		Reopen: func(t *testing.T) driver.Driver { return openT(t, url, nil) },
		Begin: func(ctx context.Context) (any, func() error, func() error, error) {
			tx, err := d.DB().BeginTx(ctx, nil)
			if err != nil {
				return nil, nil, nil, err
			}
			return tx, tx.Commit, tx.Rollback, nil
		},
		// A migration's script holds several statements. The suite's plain
		// INSERTs name the column key, which MySQL reserves: quoted here
		// as every MySQL client must write it (docs/mysql.md).
		Exec: func(ctx context.Context, q string, args ...any) error {
			q = strings.Replace(q, "(type, key", "(type, `key`", 1)
			if len(args) == 0 {
				return mysql.ExecScript(ctx, d.DB(), q)
			}
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
					"INSERT INTO " + o + " (type, `key`, message_id) VALUES ('" + typ + "', 'u-id', 'order-0001-created-by-java-app-00001')",
					"INSERT INTO " + o + " (type, `key`, created_at) VALUES ('" + typ + "', 'u-created', 999999999999999999)",
				}, []drivertest.UnreadableRow{
					{Key: "u-id", Column: "message_id"}, {Key: "u-created", Column: "created_at"},
				}
		},
		CatalogVersion: 2,
	}
}

func TestConformance(t *testing.T) {
	drivertest.Run(t, func(t *testing.T) *drivertest.Harness { return harness(t, true) })
}
