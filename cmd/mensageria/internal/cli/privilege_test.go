package cli

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"testing"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testdb"
)

// A statement PostgreSQL refuses for want of a grant used to surface as
// the server's bare text; the command now names the privilege and the
// object its role lacks.
func TestPrivilegeErrorsNameTheGrant(t *testing.T) {
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	ctx := context.Background()
	s := &shared{t: t, db: testdb.URL(), schema: schema, receiver: "http://127.0.0.1:1/m2m"}
	admin := s.app("pedidos", "pedido.criado")
	must(t, "migrate up", admin("", "migrate", "up"), 0)
	must(t, "register", admin("", "owners", "register"), 0)
	must(t, "enqueue", admin("", "enqueue", "-t", "pedido.criado", "-k", "p-1"), 0)
	drv := s.open()
	kill(t, drv, "pedido.criado", "pedidos → http https://faturamento/m2m")
	id := fmt.Sprint(s.rows(drv, "pedido.criado")[0].ID)

	role := fmt.Sprintf("mensageria_reader_%08x", rand.Uint32())
	exec := func(q string) {
		t.Helper()
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("CREATE ROLE " + role + " LOGIN")
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	p := writeFile(t, fmt.Sprintf("database: %s\nschema: %s\napp: pedidos\nroutes:\n  - type: pedido.criado\n    http: {url: http://127.0.0.1:1/m2m, token: tok}\n", u.String(), schema))
	as := func(args ...string) result { return run(t, "", nil, append(args, "--config", p)...) }

	// No grant at all: the schema.
	must(t, "status without USAGE", as("status"), ExitFailure,
		"permission denied: the config's database role needs USAGE on schema "+schema+" for 'status'", "SQLSTATE 42501")
	// Reads only: a retry needs UPDATE on the outbox, a discard DELETE.
	exec("GRANT USAGE ON SCHEMA " + schema + " TO " + role)
	exec("GRANT SELECT ON ALL TABLES IN SCHEMA " + schema + " TO " + role)
	must(t, "status with reads", as("status"), 0)
	must(t, "dead retry without UPDATE", as("dead", "retry", id), ExitFailure,
		"needs UPDATE on table "+schema+".outbox for 'dead retry'")
	must(t, "dead discard without DELETE", as("dead", "discard", id), ExitFailure,
		"needs DELETE on table "+schema+".outbox for 'dead discard'")
	must(t, "owners transfer without UPDATE", as("owners", "transfer", "type", "pedido.criado", "--from", "pedidos", "--to", "faturamento"), ExitFailure,
		"needs UPDATE on table "+schema+".owners for 'owners transfer'")
	if j := s.rows(drv, "pedido.criado")[0]; j.State != driver.StateDead {
		t.Fatalf("a refused command changed the row: %s", j.State)
	}
}
