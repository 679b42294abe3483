package daemon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/cmd/mensageria/internal/config"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
)

// DB is an opened database: its driver, and the handle beneath it for
// what the driver does not do (a readiness ping, a command's own reads).
type DB struct {
	Driver driver.Driver
	Pool   *pgxpool.Pool // PostgreSQL's; nil on SQLite and MySQL
	SQL    *sql.DB       // SQLite's or MySQL's handle; nil on PostgreSQL
	close  func()
}

// Migrate applies every missing migration (mensageria.MigrateUp) or
// checks the schema's version (mensageria.MigrateCheck) on behalf of app.
func (b *DB) Migrate(ctx context.Context, mode mensageria.MigrateMode, app string) (driver.MigrateResult, error) {
	return b.Driver.Migrate(ctx, driver.MigrateParams{Mode: mode, App: app})
}

// Close closes the driver and its handle; a nil DB, or one built around
// a driver someone else closes, does nothing.
func (b *DB) Close() {
	if b != nil && b.close != nil {
		b.close()
	}
}

// Open opens the database of a URL (postgres://, mysql://, mariadb://,
// sqlite:PATH) in schema. With create, a SQLite file that does not exist
// yet is created; without, it is an error, never created. It does not
// connect eagerly on PostgreSQL (the pool dials on first use), so commands
// that only print SQL work with the server down.
func Open(ctx context.Context, database, schema string, create bool) (*DB, error) {
	if path, ok := strings.CutPrefix(database, "sqlite:"); ok && path != "" {
		return openSQLiteFile(path, schema, create)
	}
	if config.IsMySQL(database) {
		return openMySQL(database, schema)
	}
	pcfg, err := pgxpool.ParseConfig(database)
	if err != nil {
		return nil, Usage("database: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	drv, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &DB{Driver: drv, Pool: pool, close: func() { _ = drv.Close(); pool.Close() }}, nil
}

// OpenPinged is Open, then Ping; the caller closes the DB.
func OpenPinged(ctx context.Context, database, schema string, create bool) (*DB, error) {
	b, err := Open(ctx, database, schema, create)
	if err != nil {
		return nil, err
	}
	if err := b.Ping(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Ping verifies the database answers, so a command fails with one clear
// message instead of a deep driver error.
func (b *DB) Ping(ctx context.Context) error {
	if b.Pool == nil && b.SQL == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ping := b.SQL.PingContext
	if b.Pool != nil {
		ping = b.Pool.Ping
	}
	if err := ping(ctx); err != nil {
		return fmt.Errorf("database unreachable: %w", err)
	}
	return nil
}

// IsPostgres reports whether the database is PostgreSQL's.
func (b *DB) IsPostgres() bool {
	_, ok := b.Driver.(*postgres.Driver)
	return ok
}

// ErrNotPostgres refuses what only PostgreSQL has: roles, grants,
// row-level security, NOTIFY.
var ErrNotPostgres = errors.New("not a PostgreSQL database")

// InboxNotifier is PostgreSQL's NOTIFY of stored inbox queue rows, for
// the receive daemon to announce them; nil on another database.
func (b *DB) InboxNotifier() func(ctx context.Context, consumer string) error {
	if pg, ok := b.Driver.(*postgres.Driver); ok {
		return pg.NotifyInbox
	}
	return nil
}

// GrantSQL is the SQL that grants the database role dbRole what app's
// role (relay, receive, console, producer or applier) needs
// (docs/security.md); ErrNotPostgres on another database.
func (b *DB) GrantSQL(role, dbRole, app string) (string, error) {
	pg, ok := b.Driver.(*postgres.Driver)
	if !ok {
		return "", ErrNotPostgres
	}
	return pg.GrantSQL(postgres.Role(role), dbRole, app)
}

// RowLevelSecuritySQL is the SQL of the opt-in row-level security
// (docs/security.md); ErrNotPostgres on another database.
func (b *DB) RowLevelSecuritySQL() (string, error) {
	pg, ok := b.Driver.(*postgres.Driver)
	if !ok {
		return "", ErrNotPostgres
	}
	return pg.RowLevelSecuritySQL()
}
