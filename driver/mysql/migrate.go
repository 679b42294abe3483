package mysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/xadm/mensageria/driver"
)

// migrationFS holds the numbered schema steps. Each is a script for the
// mysql client (DELIMITER around trigger bodies), which Flyway reads too.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// ErrClosed is returned by Listen after Close.
var ErrClosed = errors.New("mensageria/mysql: driver closed")

// SchemaVersionError reports a schema that does not match this build.
type SchemaVersionError struct {
	Have, Want int
}

func (e *SchemaVersionError) Error() string {
	if e.Have < e.Want {
		return fmt.Sprintf("mensageria/mysql: schema is at version %d, this build needs %d; run Migrate (or apply MigrationSQL(%d))", e.Have, e.Want, e.Have)
	}
	return fmt.Sprintf("mensageria/mysql: schema is at version %d, newer than this build's %d; upgrade this app", e.Have, e.Want)
}

// Unwrap gives driver.ErrSchemaBehind or driver.ErrSchemaAhead.
func (e *SchemaVersionError) Unwrap() error {
	if e.Have < e.Want {
		return driver.ErrSchemaBehind
	}
	return driver.ErrSchemaAhead
}

type migrationFile struct {
	version int
	name    string
	sql     string // with {{p}} for the prefix
}

var migrationFiles = func() []migrationFile {
	ents, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		panic(err)
	}
	var out []migrationFile
	for _, e := range ents {
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != len(out)+1 {
			panic(fmt.Sprintf("mensageria/mysql: migration %s must be named NNN_name.sql and numbered from 1 without gaps", e.Name()))
		}
		b, err := migrationFS.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			panic(err)
		}
		out = append(out, migrationFile{version: v, name: name, sql: string(b)})
	}
	return out
}()

func latest() int { return len(migrationFiles) }

// catalogVersion is the migration that creates the ownership catalog.
const catalogVersion = 2

func (d *Driver) versionTable() string { return d.prefix + "migrations" }

// bookkeeping is the version table, created by every script so that one
// applied by hand records itself.
func (d *Driver) bookkeeping() string {
	return "CREATE TABLE IF NOT EXISTS " + d.versionTable() + " (\n    version    INT          NOT NULL PRIMARY KEY,\n    name       VARCHAR(200) NOT NULL,\n    applied_at BIGINT       NOT NULL\n) ENGINE = InnoDB;\n"
}

// MigrationSQL returns every migration after from, each a script for the
// mysql client or Flyway (V<n>__<name>.sql) that records its version in
// <prefix>migrations as its last statement.
func (d *Driver) MigrationSQL(from int) ([]driver.Migration, error) {
	if from < 0 || from > latest() {
		return nil, &SchemaVersionError{Have: from, Want: latest()}
	}
	var out []driver.Migration
	for _, m := range migrationFiles[from:] {
		text := d.bookkeeping() + "\n" + strings.ReplaceAll(m.sql, "{{p}}", d.prefix) +
			fmt.Sprintf("\nINSERT INTO %s (version, name, applied_at) VALUES (%d, '%s', %s);\n", d.versionTable(), m.version, m.name, nowExpr)
		out = append(out, driver.Migration{Version: m.version, Name: m.name, SQL: text})
	}
	return out, nil
}

// migrateLockWait is how long Migrate waits for another migrator.
const migrateLockWait = 60 * time.Second

// Migrate brings the schema to the newest version, or (MigrateCheck) only
// compares. Concurrent migrators serialize on GET_LOCK, named after the
// database and the prefix and held by the one connection that runs the
// scripts; a migrator that dies mid-way releases it with its connection,
// and the next runs the unfinished migration again from its top.
func (d *Driver) Migrate(ctx context.Context, p driver.MigrateParams) (driver.MigrateResult, error) {
	want := latest()
	if p.Mode == driver.MigrateCheck {
		have, err := d.version(ctx, d.db)
		if err != nil {
			return driver.MigrateResult{}, err
		}
		res := driver.MigrateResult{From: have, To: have, Latest: want}
		if have >= catalogVersion {
			if res.Owner, err = d.migrationsOwner(ctx, d.db); err != nil {
				return res, err
			}
		}
		if have != want {
			return res, &SchemaVersionError{Have: have, Want: want}
		}
		return res, nil
	}
	if p.Mode != driver.MigrateUp {
		return driver.MigrateResult{}, fmt.Errorf("mensageria/mysql: unknown migrate mode %d", p.Mode)
	}
	c, err := d.db.Conn(ctx)
	if err != nil {
		return driver.MigrateResult{}, wrap("migrate", err)
	}
	defer c.Close()
	lock := "mensageria_migrate:" + d.prefix
	var got sql.NullInt64
	if err := c.QueryRowContext(ctx, d.q.migrateLock, lock, int(migrateLockWait.Seconds())).Scan(&got); err != nil {
		return driver.MigrateResult{}, wrap("migrate lock", err)
	}
	if got.Int64 != 1 {
		return driver.MigrateResult{}, fmt.Errorf("mensageria/mysql: migrate: another migrator held the lock %q for %s", lock, migrateLockWait)
	}
	defer func() {
		_, _ = c.ExecContext(context.WithoutCancel(ctx), d.q.migrateUnlock, lock)
	}()
	have, err := d.version(ctx, c)
	if err != nil {
		return driver.MigrateResult{}, err
	}
	res := driver.MigrateResult{From: have, To: have, Latest: want}
	if have > want {
		return res, &SchemaVersionError{Have: have, Want: want}
	}
	if have >= catalogVersion {
		if res.Owner, err = d.migrationsOwner(ctx, c); err != nil {
			return res, err
		}
		if res.Owner != "" && res.Owner != p.App {
			return res, &driver.OwnerConflictError{App: p.App, Conflicts: []driver.Ownership{{
				Resource: driver.Resource{Kind: driver.ResourceMigrations, Name: driver.MigrationsName}, App: res.Owner}}}
		}
	}
	ms, err := d.MigrationSQL(have)
	if err != nil {
		return res, err
	}
	for _, m := range ms {
		if err := execScript(ctx, c, m.SQL); err != nil {
			return res, fmt.Errorf("mensageria/mysql: migration %d (%s): %w", m.Version, m.Name, err)
		}
		res.Applied = append(res.Applied, m.Version)
		res.To = m.Version
	}
	if res.Owner == "" && p.App != "" && res.To >= catalogVersion {
		if _, err := c.ExecContext(ctx, d.q.migrationsOwnerSet, string(driver.ResourceMigrations), driver.MigrationsName, p.App); err != nil {
			return res, wrap("recording the migrations owner", err)
		}
		if res.Owner, err = d.migrationsOwner(ctx, c); err != nil {
			return res, err
		}
	}
	return res, nil
}

type rowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (d *Driver) migrationsOwner(ctx context.Context, q rowQuerier) (string, error) {
	var app sql.NullString
	err := q.QueryRowContext(ctx, d.q.migrationsOwner, string(driver.ResourceMigrations), driver.MigrationsName).Scan(&app)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", wrap("reading the migrations owner", err)
	}
	return app.String, nil
}

func (d *Driver) version(ctx context.Context, q rowQuerier) (int, error) {
	var n int
	if err := q.QueryRowContext(ctx, d.q.schemaMigrated, d.versionTable()).Scan(&n); err != nil {
		return 0, wrap("schema version", err)
	}
	if n == 0 {
		return 0, nil
	}
	var v int
	if err := q.QueryRowContext(ctx, d.q.schemaVersion).Scan(&v); err != nil {
		return 0, wrap("schema version", err)
	}
	return v, nil
}
