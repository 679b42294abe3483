package chaos

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest/pgserver"
)

// The run's database: a private PostgreSQL server the harness starts, so
// that the nemesis may crash it, restart it, fill its connection slots and
// take privileges away, and never touches the machine's shared server.
const (
	chaosDatabase = "chaos"
	chaosSchema   = "chaos"
	// Workers connect as these roles, none a superuser: a relay role per
	// app, so a privilege is taken from one app's relays only, one for the
	// receivers, and one for the sessions that fill the server up.
	roleReceiver = "chaos_receiver"
	roleHog      = "chaos_hog"
)

func relayRole(app string) string { return "chaos_relay_" + app }

// serverSettings are a fresh server's defaults (autovacuum on, fsync on,
// synchronous commit) but for the slots kept for superusers: enough for
// the harness's own pool, so the harness still runs, checks and heals
// while other sessions hold every other slot.
var serverSettings = map[string]string{
	"max_connections":                "100",
	"superuser_reserved_connections": "24",
}

// harnessConns bounds the harness's pool (producers, monitor, nemesis),
// within the superuser slots.
const harnessConns = 20

type chaosDB struct {
	srv *pgserver.Server
}

// startDB starts the run's server and creates its database and roles.
func startDB(t *testing.T) *chaosDB {
	srv := testdb.PrivateServer(t, pgserver.Config{Settings: serverSettings})
	t.Logf("private PostgreSQL server on port %d, log %s", srv.Port, srv.LogPath())
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	stmts := []string{"CREATE DATABASE " + chaosDatabase}
	for _, r := range []string{relayRole("a"), relayRole("b"), roleReceiver, roleHog} {
		stmts = append(stmts, "CREATE ROLE "+r+" LOGIN NOSUPERUSER")
	}
	for _, q := range stmts {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return &chaosDB{srv: srv}
}

// pool is the harness's pool, as the superuser.
func (d *chaosDB) pool(t *testing.T) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(d.srv.URLFor("postgres", chaosDatabase))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = harnessConns
	// A server in crash recovery accepts the TCP connection and answers
	// late; the harness retries rather than hangs. (Its dead connections
	// after a crash or restart are dropped by the nemesis: Pool.Reset.)
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// url connects as role to the run's database.
func (d *chaosDB) url(role string) string { return d.srv.URLFor(role, chaosDatabase) }

// grant gives the workers' roles what they need on the migrated schema and
// the history tables: to read and write rows, never to change the schema.
func (h *harness) grant() {
	s := h.schema
	roles := relayRole("a") + ", " + relayRole("b") + ", " + roleReceiver
	for _, q := range []string{
		"GRANT USAGE ON SCHEMA " + s + " TO " + roles,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + s + " TO " + roles,
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA " + s + " TO " + roles,
	} {
		if _, err := h.pool.Exec(h.ctx, q); err != nil {
			h.t.Fatalf("%s: %v", q, err)
		}
	}
}
