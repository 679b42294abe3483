package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/driver/sqlite"
	"github.com/xadm/mensageria/internal/testdb"
)

// Issue 24: `status` (what /metrics' outbox gauges read too) and `dead
// list` survive rows a plain INSERT stored that the relay cannot read, on
// both backends: at a schema version before the rules that refuse them,
// `migrate up` parks them dead with their reason, and status and the dead
// list show them. Before, status failed with SQLSTATE 22008 on PostgreSQL.
func TestStatusAndDeadListSurviveUnreadableRows(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		pool := testdb.Pool(t)
		schema := testdb.Schema(t)
		d, err := postgres.New(pool, &postgres.Config{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		exec := func(q string) error { _, err := pool.Exec(context.Background(), q); return err }
		unreadableRowsSurvive(t, writeConfig(t, testdb.URL(), schema, "http://127.0.0.1:1/m2m"), d, 12, exec,
			"INSERT INTO "+schema+".outbox (type, key, created_at) VALUES ('pedido.criado', 'inf', '-infinity'), ('pedido.criado', 'far', '20000-01-01 00:00:00+00'), ('pedido.criado', 'good', now())",
			"created_at is -infinity")
	})
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "m.db")
		d, err := sqlite.Open(path, &sqlite.Config{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		db := d.DB()
		exec := func(q string) error { _, err := db.Exec(q); return err }
		unreadableRowsSurvive(t, writeConfig(t, "sqlite:"+path, "mensageria", "http://127.0.0.1:1/m2m"), d, 7, exec,
			"INSERT INTO mensageria_outbox (type, key, message_id) VALUES ('pedido.criado', 'bad-id', 'order-0001-created-by-java-app-00001'), ('pedido.criado', 'good', '0190f0e2-7c3b-7def-8abc-0123456789ab'); "+
				"INSERT INTO mensageria_outbox (type, key, created_at) VALUES ('pedido.criado', 'far', 253402300800000000)",
			"message_id is not a UUID")
	})
}

// unreadableRowsSurvive brings d to the version before rules, registers
// the config's app, stores the rows of insert, and checks status, the
// upgrade and the dead list.
func unreadableRowsSurvive(t *testing.T, cfg string, d driver.Driver, rules int, exec func(string) error, insert, says string) {
	t.Helper()
	ms, err := d.MigrationSQL(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:rules-1] {
		if err := exec(m.SQL); err != nil {
			t.Fatalf("migration %d: %v", m.Version, err)
		}
	}
	c := func(args ...string) result {
		t.Helper()
		return run(t, "", tokEnv, append(args, "--config", cfg)...)
	}
	if _, err := d.Register(context.Background(), driver.RegisterParams{App: "pedidos", Resources: []driver.Resource{{Kind: driver.ResourceType, Name: "pedido.criado"}}}); err != nil {
		t.Fatal(err)
	}
	if err := exec(insert); err != nil {
		t.Fatal(err)
	}
	if r := c("migrate", "up"); r.code != 0 {
		t.Fatalf("migrate up with unreadable rows stored: %+v", r)
	}
	r := c("status", "--json")
	if r.code != 0 || !strings.Contains(r.out, `"pedido.criado"`) {
		t.Fatalf("status with unreadable rows: %+v", r)
	}
	r = c("dead", "list")
	if r.code != 0 || !strings.Contains(r.out, "unreadable row: "+says) {
		t.Fatalf("dead list with unreadable rows: %+v", r)
	}
	// JSON holds years 1 to 9999 only: a time past them is listed as
	// unreadable, not a failure of the whole listing.
	r = c("dead", "list", "--json")
	if r.code != 0 || !strings.Contains(r.out, `"far"`) {
		t.Fatalf("dead list --json with unreadable rows: %+v", r)
	}
}
