package chaos

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest/pgserver"
)

// serverSettings are a fresh server's defaults (autovacuum on, fsync on,
// synchronous commit) but for the slots kept for superusers: enough for
// the harness's own pool, so the harness still runs, checks and heals
// while other sessions hold every other slot.
var serverSettings = map[string]string{
	"max_connections":                "100",
	"superuser_reserved_connections": "24",
}

// pgBackend is the run's private PostgreSQL server: the driver's tables
// and the history's in schema chaos of database chaos, the harness
// connected as the superuser.
type pgBackend struct {
	srv  *pgserver.Server
	pool *pgxpool.Pool
}

// startPG starts the run's server and creates its database, roles and
// schema.
func startPG(t *testing.T) *pgBackend {
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
	cfg, err := pgxpool.ParseConfig(srv.URLFor("postgres", chaosDatabase))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = harnessConns
	// A server in crash recovery accepts the TCP connection and answers
	// late; the harness retries rather than hangs. (Its dead connections
	// after a crash or restart are dropped by start and restart.)
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+chaosSchema); err != nil {
		t.Fatal(err)
	}
	return &pgBackend{srv: srv, pool: pool}
}

func (b *pgBackend) kind() string                 { return "PostgreSQL" }
func (b *pgBackend) workerURL(role string) string { return b.srv.URLFor(role, chaosDatabase) }
func (b *pgBackend) table(name string) string     { return chaosSchema + "." + name }
func (b *pgBackend) lockShared() string           { return " FOR SHARE" }
func (b *pgBackend) micros(col string) string {
	return "(extract(epoch FROM " + col + ") * 1000000)::bigint"
}
func (b *pgBackend) faultName(kind string) string { return kind }

// durable: the relays and receivers commit asynchronously, and a crash
// may lose those commits (the inbox absorbs the redeliveries).
func (b *pgBackend) durable() bool         { return false }
func (b *pgBackend) checkHistory(*harness) {}

func (b *pgBackend) exec(ctx context.Context, q string, args ...any) error {
	_, err := b.pool.Exec(ctx, q, args...)
	return err
}

func (b *pgBackend) queryRow(ctx context.Context, q string, args ...any) rowScanner {
	return b.pool.QueryRow(ctx, q, args...)
}

func (b *pgBackend) query(ctx context.Context, q string, args ...any) (rowsScanner, error) {
	rows, err := b.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

type pgTx struct{ tx pgx.Tx }

func (b *pgBackend) begin(ctx context.Context) (businessTx, error) {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return pgTx{tx}, nil
}

func (t pgTx) exec(ctx context.Context, q string, args ...any) error {
	_, err := t.tx.Exec(ctx, q, args...)
	return err
}
func (t pgTx) commit(ctx context.Context) error   { return t.tx.Commit(ctx) }
func (t pgTx) rollback(ctx context.Context) error { return t.tx.Rollback(ctx) }
func (t pgTx) raw() any                           { return t.tx }

func (b *pgBackend) newDriver(t testing.TB) driver.Driver {
	drv, err := postgres.New(b.pool, &postgres.Config{Schema: chaosSchema})
	if err != nil {
		t.Fatal(err)
	}
	return drv
}

// setup adds the history tables and the outbox trigger that records every
// claim and settle, then grants the workers' roles what they need: to read
// and write rows, never to change the schema.
func (b *pgBackend) setup(h *harness) {
	s := chaosSchema
	ddl := `
CREATE TABLE ` + s + `.chaos_arrivals (id bigserial PRIMARY KEY, n bigint NOT NULL, type text NOT NULL, attempt int NOT NULL,
	route text NOT NULL, relay text NOT NULL, ack_dropped bool NOT NULL);
CREATE TABLE ` + s + `.chaos_effects (seq bigserial PRIMARY KEY, n bigint NOT NULL, arrival_id bigint NOT NULL);
CREATE TABLE ` + s + `.chaos_leases (seq bigserial PRIMARY KEY, row_id bigint NOT NULL, n bigint NOT NULL, type text NOT NULL,
	kind text NOT NULL, token bigint NOT NULL, until timestamptz NOT NULL, at timestamptz NOT NULL, app_name text NOT NULL);
CREATE TABLE ` + s + `.chaos_business (producer int PRIMARY KEY, value bigint NOT NULL);
-- now() is the transaction's time: the very clock the settle guard
-- (lease_until > now()) compares with.
CREATE FUNCTION ` + s + `.chaos_lease_log() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
	k text; tok bigint; lu timestamptz; r ` + s + `.outbox;
BEGIN
	IF TG_OP = 'DELETE' THEN
		IF OLD.lease_token IS NULL THEN RETURN NULL; END IF;
		k := 'delivered'; tok := OLD.lease_token; lu := OLD.lease_until; r := OLD;
	ELSIF NEW.lease_token IS NOT NULL AND (NEW.lease_token IS DISTINCT FROM OLD.lease_token OR NEW.lease_until IS DISTINCT FROM OLD.lease_until) THEN
		k := 'claim'; tok := NEW.lease_token; lu := NEW.lease_until; r := NEW;
	ELSIF OLD.lease_token IS NOT NULL AND NEW.lease_token IS NULL THEN
		tok := OLD.lease_token; lu := OLD.lease_until; r := NEW;
		k := CASE WHEN NEW.state = 'dead' THEN 'dead' WHEN NEW.state = 'delivered' THEN 'delivered'
			WHEN NEW.attempts < OLD.attempts AND NEW.available_at > now() THEN 'postpone'
			WHEN NEW.attempts < OLD.attempts THEN 'release' ELSE 'retry' END;
	ELSE
		RETURN NULL;
	END IF;
	INSERT INTO ` + s + `.chaos_leases (row_id, n, type, kind, token, until, at, app_name)
	VALUES (r.id, ('x' || lpad(right(replace(r.message_id::text, '-', ''), 12), 16, '0'))::bit(64)::bigint,
		r.type, k, tok, lu, now(), current_setting('application_name'));
	RETURN NULL;
END $$;
CREATE TRIGGER chaos_lease_log AFTER UPDATE OR DELETE ON ` + s + `.outbox FOR EACH ROW EXECUTE FUNCTION ` + s + `.chaos_lease_log();
`
	if _, err := b.pool.Exec(h.ctx, ddl); err != nil {
		h.t.Fatalf("history tables: %v", err)
	}
	roles := relayRole("a") + ", " + relayRole("b") + ", " + roleReceiver
	for _, q := range []string{
		"GRANT USAGE ON SCHEMA " + s + " TO " + roles,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA " + s + " TO " + roles,
		"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA " + s + " TO " + roles,
	} {
		if _, err := b.pool.Exec(h.ctx, q); err != nil {
			h.t.Fatalf("%s: %v", q, err)
		}
	}
}

// killSessions: pg_terminate_backend on the relays' pools, their LISTEN
// sessions and their election session.
func (b *pgBackend) killSessions(ctx context.Context, h *harness, a string) (int, error) {
	var n int
	err := b.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND (application_name LIKE $1 OR application_name = $2)`,
		"chaos "+h.run+" "+a+"/%", "mensageria relay "+h.appName[a]).Scan(&n)
	return n, err
}

// endWorkers: pg_terminate_backend on every session of the run's relays
// and receivers.
func (b *pgBackend) endWorkers(ctx context.Context, h *harness) (int, error) {
	var n int
	err := b.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND (application_name LIKE $1 OR application_name LIKE $2)`,
		"chaos "+h.run+" %", "mensageria relay chaos-"+h.run+"-%").Scan(&n)
	return n, err
}

// holdWAL stops the WAL writer (pgserver.HoldWAL): the asynchronous
// commits made until the crash stay in shared memory, and the crash
// loses them.
func (b *pgBackend) holdWAL(ctx context.Context) (func(), error) { return b.srv.HoldWAL(ctx) }

// crash is an immediate shutdown.
func (b *pgBackend) crash() error { return b.srv.Crash() }

func (b *pgBackend) start(ctx context.Context) error {
	if err := b.srv.Start(ctx); err != nil {
		return err
	}
	b.pool.Reset()
	return nil
}

// restart is a fast shutdown and a start.
func (b *pgBackend) restart(ctx context.Context) error {
	err := b.srv.Restart(ctx)
	b.pool.Reset()
	return err
}

func (b *pgBackend) connectHog(ctx context.Context) (func(), error) {
	c, err := pgx.Connect(ctx, b.workerURL(roleHog))
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "53300": // too_many_connections
		return nil, errNoSlot
	case err != nil:
		return nil, err
	}
	return func() { _ = c.Close(context.Background()) }, nil
}

// revocation: the privilege itself, on the outbox or on the schema.
func (b *pgBackend) revocation(r, a string) (take, give []string) {
	what := map[string]string{
		"delete": "DELETE ON TABLE " + b.table("outbox"),
		"update": "UPDATE ON TABLE " + b.table("outbox"),
		"usage":  "USAGE ON SCHEMA " + chaosSchema,
	}[r]
	return []string{"REVOKE " + what + " FROM " + relayRole(a)}, []string{"GRANT " + what + " TO " + relayRole(a)}
}

// pinHorizon holds a snapshot open for the hold: vacuum keeps every row
// version dead since, so the relays' claims and settles walk ever more
// dead tuples.
func (b *pgBackend) pinHorizon(ctx context.Context, h *harness) {
	_, hold := h.p.dbHolds()
	tx, err := b.pool.BeginTx(h.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		h.t.Errorf("pin the xmin horizon: %v", err)
		return
	}
	defer func() { _ = tx.Rollback(h.ctx) }()
	var x0 int64
	if err := tx.QueryRow(h.ctx, "SELECT txid_current()").Scan(&x0); err != nil {
		h.t.Errorf("pin the xmin horizon: %v", err)
		return
	}
	h.logf("nemesis: a transaction pins the xmin horizon for %s", hold)
	sleepCtx(ctx, hold)
	var age int64
	var dead int64
	// Read from outside the pinning transaction: its own snapshot is old.
	_ = b.pool.QueryRow(h.ctx, "SELECT txid_current() - $1", x0).Scan(&age)
	_ = b.pool.QueryRow(h.ctx, "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'outbox'", chaosSchema).Scan(&dead)
	if err := tx.Commit(h.ctx); err != nil {
		h.t.Errorf("end the pinning transaction: %v", err)
	}
	h.fault(figXminAge, int(age))
	h.logf("nemesis: xmin horizon released, %d transactions behind; outbox dead tuples %d", age, dead)
}
