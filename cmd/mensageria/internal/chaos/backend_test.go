package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
)

// backend is the database a run is on, PostgreSQL or MariaDB: where the
// workers connect, the harness's statements (written once, with $n
// placeholders), and what the nemesis's database faults do to its server.
// Both run the same schedule; a fault with no meaning on a database is
// skipped there (docs/reliability.md, "On MariaDB").
type backend interface {
	// kind names the database in the logs: "PostgreSQL", "MariaDB".
	kind() string
	// workerURL connects a worker process as role to the run's database.
	workerURL(role string) string
	// table names one of the run's tables: the driver's ("outbox",
	// "leader") or the history's ("chaos_arrivals", ...).
	table(name string) string
	exec(ctx context.Context, q string, args ...any) error
	queryRow(ctx context.Context, q string, args ...any) rowScanner
	query(ctx context.Context, q string, args ...any) (rowsScanner, error)
	// begin starts a business transaction; its raw form goes to EnqueueTx.
	begin(ctx context.Context) (businessTx, error)
	// lockShared ends a SELECT that waits for a writer of its rows to end.
	lockShared() string
	// micros is a time column of the lease history as unix microseconds.
	micros(col string) string
	// setup migrates the run's schema, adds the history tables and the
	// outbox trigger that records every claim and settle, and grants the
	// workers' roles what they need.
	setup(h *harness)
	// newDriver is a driver for the producers' clients.
	newDriver(t *testing.T) driver.Driver
	// killSessions ends every session of app's relays and returns how
	// many it ended.
	killSessions(ctx context.Context, h *harness, app string) (int, error)
	// dbFault injects one of dbNemesisKinds and returns once it is healed.
	dbFault(ctx context.Context, h *harness, kind, app string)
	// skips reports a fault of the schedule that has no meaning here.
	skips(kind string) bool
	// faultName is the name of a fault kind in this database's figures.
	faultName(kind string) string
	// checkHistory checks what only this database's history shows, once
	// the run is over.
	checkHistory(h *harness)
}

type rowScanner interface{ Scan(dest ...any) error }

type rowsScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

type businessTx interface {
	exec(ctx context.Context, q string, args ...any) error
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
	raw() any
}

// pgBackend is the run's private PostgreSQL server (dbserver_test.go).
type pgBackend struct {
	db     *chaosDB
	pool   *pgxpool.Pool
	schema string
}

func startPG(t *testing.T) *pgBackend {
	db := startDB(t)
	pool := db.pool(t)
	if _, err := pool.Exec(context.Background(), "CREATE SCHEMA "+chaosSchema); err != nil {
		t.Fatal(err)
	}
	return &pgBackend{db: db, pool: pool, schema: chaosSchema}
}

func (b *pgBackend) kind() string                 { return "PostgreSQL" }
func (b *pgBackend) workerURL(role string) string { return b.db.url(role) }
func (b *pgBackend) table(name string) string     { return b.schema + "." + name }
func (b *pgBackend) lockShared() string           { return " FOR SHARE" }
func (b *pgBackend) micros(col string) string {
	return "(extract(epoch FROM " + col + ") * 1000000)::bigint"
}

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

func (b *pgBackend) setup(h *harness) { h.setupSchema() }

func (b *pgBackend) newDriver(t *testing.T) driver.Driver {
	drv, err := postgres.New(b.pool, &postgres.Config{Schema: b.schema})
	if err != nil {
		t.Fatal(err)
	}
	return drv
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

func (b *pgBackend) dbFault(ctx context.Context, h *harness, kind, a string) { h.dbFault(ctx, kind, a) }
func (b *pgBackend) skips(string) bool                                       { return false }
func (b *pgBackend) faultName(kind string) string                            { return kind }
func (b *pgBackend) checkHistory(*harness)                                   {}

// sqlBackend runs the harness's statements on a database/sql pool,
// turning $n placeholders into ?.
type sqlBackend struct {
	db *sql.DB
}

// rebind turns q's $n placeholders into ? and orders args to match,
// repeating one that q uses twice.
func rebind(q string, args []any) (string, []any) {
	var b strings.Builder
	var out []any
	for i := 0; i < len(q); i++ {
		if q[i] != '$' {
			b.WriteByte(q[i])
			continue
		}
		j := i + 1
		for j < len(q) && q[j] >= '0' && q[j] <= '9' {
			j++
		}
		n, err := strconv.Atoi(q[i+1 : j])
		if err != nil || n < 1 || n > len(args) {
			b.WriteByte(q[i])
			continue
		}
		b.WriteByte('?')
		out = append(out, args[n-1])
		i = j - 1
	}
	return b.String(), out
}

func (b *sqlBackend) exec(ctx context.Context, q string, args ...any) error {
	q, args = rebind(q, args)
	_, err := b.db.ExecContext(ctx, q, args...)
	return err
}

func (b *sqlBackend) queryRow(ctx context.Context, q string, args ...any) rowScanner {
	q, args = rebind(q, args)
	return b.db.QueryRowContext(ctx, q, args...)
}

type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

func (b *sqlBackend) query(ctx context.Context, q string, args ...any) (rowsScanner, error) {
	q, args = rebind(q, args)
	rows, err := b.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

type sqlTx struct{ tx *sql.Tx }

func (b *sqlBackend) begin(ctx context.Context) (businessTx, error) {
	tx, err := b.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	return sqlTx{tx}, nil
}

func (t sqlTx) exec(ctx context.Context, q string, args ...any) error {
	q, args = rebind(q, args)
	_, err := t.tx.ExecContext(ctx, q, args...)
	return err
}
func (t sqlTx) commit(context.Context) error   { return t.tx.Commit() }
func (t sqlTx) rollback(context.Context) error { return t.tx.Rollback() }
func (t sqlTx) raw() any                       { return t.tx }

func TestRebind(t *testing.T) {
	q, args := rebind("SELECT coalesce(max(seq), $1), count(*) FROM t WHERE seq > $1 AND k = $2 AND p LIKE '$x'", []any{7, "k"})
	if want := "SELECT coalesce(max(seq), ?), count(*) FROM t WHERE seq > ? AND k = ? AND p LIKE '$x'"; q != want {
		t.Errorf("query %q, want %q", q, want)
	}
	if fmt.Sprint(args) != "[7 7 k]" {
		t.Errorf("args %v, want [7 7 k]", args)
	}
}
