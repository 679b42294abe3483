package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/xadm/mensageria/driver"
)

// The run's database, on a private server the harness starts, so that the
// nemesis may crash it, restart it, fill its connection slots and take
// privileges away, and never touches the machine's shared server.
const (
	chaosDatabase = "chaos"
	// chaosSchema holds the driver's tables and the history's: a schema
	// on PostgreSQL, a table-name prefix on MariaDB.
	chaosSchema = "chaos"
	// Workers connect as these roles, none a superuser: a relay role per
	// app, so a privilege is taken from one app's relays only, one for the
	// receivers, and one for the sessions that fill the server up.
	roleReceiver = "chaos_receiver"
	roleHog      = "chaos_hog"
)

func relayRole(app string) string { return "chaos_relay_" + app }

// harnessConns bounds the harness's pool (producers, monitor, nemesis),
// within the connections the server keeps for it when every other slot is
// taken.
const harnessConns = 20

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
	// setup adds the history tables and the outbox trigger that records
	// every claim and settle to the migrated schema, and grants the
	// workers' roles what they need.
	setup(h *harness)
	// newDriver is a driver on the run's tables: the producers' clients',
	// and the one that migrates them.
	newDriver(t testing.TB) driver.Driver
	// killSessions ends every session of app's relays and returns how
	// many it ended; endWorkers ends every session of every worker.
	killSessions(ctx context.Context, h *harness, app string) (int, error)
	endWorkers(ctx context.Context, h *harness) (int, error)
	// faultName is the name of a fault kind, or of a figure of the
	// database's faults, in this database's figures.
	faultName(kind string) string
	// checkHistory checks what only this database's history shows, once
	// the run is over.
	checkHistory(h *harness)

	// The database faults' parts, which nemesis_db_test.go puts together
	// the same way on every database:
	//
	// durable reports whether every commit is on disk before it returns,
	// so that a crash may lose none.
	durable() bool
	// holdWAL keeps what is committed asynchronously from the disk until
	// release (or the crash, which then loses it); nothing to do where
	// every commit is durable.
	holdWAL(ctx context.Context) (release func(), err error)
	// crash ends the server at once; start starts it again, and restart
	// shuts it down cleanly and starts it. Both drop the harness's
	// connections to the server that is gone.
	crash() error
	start(ctx context.Context) error
	restart(ctx context.Context) error
	// connectHog opens one more session as roleHog and returns what
	// closes it; errNoSlot when the server refused it for want of a free
	// connection slot.
	connectHog(ctx context.Context) (close func(), err error)
	// revocation is what takes revocation r (one of revocations) from
	// app's relay role, and what gives it back.
	revocation(r, app string) (take, give []string)
	// pinHorizon holds a snapshot open for the hold, so that the
	// database may clean up nothing changed since.
	pinHorizon(ctx context.Context, h *harness)
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
