package mensageria_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

// postgresExamples names the Examples that need PostgreSQL: their names
// end in "_postgres" (godoc shows "Example (Postgres)").
const postgresExamples = `^Example.*_postgres$`

// TestMain skips the Examples that need PostgreSQL when it cannot be
// reached, as testdb skips a test, except when CI is set: there a missing
// service is a failure. An Example has no t to skip, so the binary's
// -test.skip is widened instead.
func TestMain(m *testing.M) {
	flag.Parse()
	if err := testdb.Reachable(); err != nil && os.Getenv("CI") == "" {
		skip := flag.Lookup("test.skip")
		pattern := postgresExamples
		if cur := skip.Value.String(); cur != "" {
			pattern = cur + "|" + pattern
		}
		if err := skip.Value.Set(pattern); err != nil {
			panic(err)
		}
		fmt.Fprintf(os.Stderr, "PostgreSQL at %s not reachable (%v): the Examples that need it are skipped; set CI=1 to make this a failure\n", testdb.URL(), err)
	}
	os.Exit(m.Run())
}

// openExampleDB opens a pool on the test database and a driver on a fresh
// schema, migrated, which is also the pool's search_path: an Example's own
// tables ("orders") go there too. done drops the schema and closes the
// pool.
func openExampleDB() (pool *pgxpool.Pool, drv *postgres.Driver, done func()) {
	ctx := context.Background()
	schema := fmt.Sprintf("example_%08x", rand.Uint32())
	cfg, err := pgxpool.ParseConfig(testdb.URL())
	if err != nil {
		panic(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		panic(err)
	}
	drv, err = postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	if _, err := drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp, App: "pedidos"}); err != nil {
		panic(err)
	}
	return pool, drv, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			fmt.Fprintln(os.Stderr, "drop schema:", err)
		}
		pool.Close()
	}
}
