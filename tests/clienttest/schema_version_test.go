package clienttest_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/driver/sqlite"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

// migrationPrinter is what both backends offer for `mensageria migrate sql`.
type migrationPrinter interface {
	driver.Driver
	MigrationSQL(from int) ([]driver.Migration, error)
}

// A relay of this build on a schema one migration behind it refuses to
// start, naming the app, and claims nothing: a relay
// whose settle names a table the missing migration adds would deliver
// every row and settle none, redelivering the backlog every lease. Once
// the schema is migrated, the same client starts. A schema a newer build
// migrated is refused as well.
func TestStartRefusesASchemaNotOfThisBuild(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		// open returns a driver on a fresh database, a way to run SQL on
		// it, and the table its versions are recorded in.
		open func(t *testing.T) (migrationPrinter, func(string) error, string)
	}{
		{"postgres", func(t *testing.T) (migrationPrinter, func(string) error, string) {
			pool := testdb.Pool(t)
			schema := testdb.Schema(t)
			d, err := postgres.New(pool, &postgres.Config{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			return d, func(q string) error { _, err := pool.Exec(ctx, q); return err }, schema + ".schema_migrations"
		}},
		{"sqlite", func(t *testing.T) (migrationPrinter, func(string) error, string) {
			d, err := sqlite.Open(filepath.Join(t.TempDir(), "m.db"), &sqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
			return d, func(q string) error { _, err := d.DB().ExecContext(ctx, q); return err }, "mensageria_migrations"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, exec, versions := tc.open(t)
			ms, err := d.MigrationSQL(0)
			if err != nil || len(ms) < 2 {
				t.Fatalf("MigrationSQL(0) = %d migrations, %v", len(ms), err)
			}
			for _, m := range ms[:len(ms)-1] {
				if err := exec(m.SQL); err != nil {
					t.Fatalf("migration %d: %v", m.Version, err)
				}
			}
			app := uniqueApp("behind")
			rec := &recorder{}
			c := newClient(t, d, fastConfig(app, mensageria.NewRegistry().MustRegister("behind.t", rec)))
			err = c.Start(ctx)
			if !errors.Is(err, mensageria.ErrSchemaBehind) || !strings.Contains(err.Error(), app) {
				_ = c.Stop(ctx)
				t.Fatalf("Start on a schema at version %d = %v; want ErrSchemaBehind naming app %q", len(ms)-1, err, app)
			}
			if _, err := c.Migrate(ctx, driver.MigrateUp); err != nil {
				t.Fatal(err)
			}
			start(t, c)
			if _, err := c.Enqueue(ctx, mensageria.Message{Type: "behind.t", Key: "k"}); err != nil {
				t.Fatal(err)
			}
			mensageriatest.Eventually(t, 10*time.Second, func() bool { return rec.len() == 1 }, "the message delivered once the schema is migrated")

			// A schema a newer build migrated is refused too: this build
			// cannot know what the newer migration changed.
			if err := exec(fmt.Sprintf("INSERT INTO %s (version, name) VALUES (%d, 'from a newer build')", versions, len(ms)+1)); err != nil {
				t.Fatal(err)
			}
			newer := newClient(t, d, fastConfig(uniqueApp("ahead"), mensageria.NewRegistry().MustRegister("ahead.t", &recorder{})))
			if err := newer.Start(ctx); !errors.Is(err, mensageria.ErrSchemaAhead) {
				_ = newer.Stop(ctx)
				t.Fatalf("Start on a schema at version %d, this build knowing %d = %v; want ErrSchemaAhead", len(ms)+1, len(ms), err)
			}
		})
	}
}
