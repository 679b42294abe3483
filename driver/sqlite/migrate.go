package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/xadm/mensageria/driver"
)

// ErrClosed is returned by Listen after Close.
var ErrClosed = errors.New("mensageria/sqlite: driver closed")

// SchemaVersionError tells where the schema is and where this build needs it.
// It wraps driver.ErrSchemaBehind or driver.ErrSchemaAhead.
type SchemaVersionError struct {
	Have, Want int
}

func (e *SchemaVersionError) Error() string {
	if e.Have < e.Want {
		return fmt.Sprintf("mensageria/sqlite: schema is at version %d, this build needs %d; run Migrate (or apply MigrationSQL(%d))", e.Have, e.Want, e.Have)
	}
	return fmt.Sprintf("mensageria/sqlite: schema is at version %d, newer than this build's %d; upgrade this app", e.Have, e.Want)
}

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

// migrationFiles is parsed once; a malformed embedded name is a build bug.
var migrationFiles = func() []migrationFile {
	ents, err := fs.ReadDir(files, "migrations")
	if err != nil {
		panic(err)
	}
	var out []migrationFile
	for _, e := range ents {
		base := strings.TrimSuffix(e.Name(), ".sql")
		num, name, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v != len(out)+1 {
			panic(fmt.Sprintf("mensageria/sqlite: migration %s must be named NNN_name.sql and numbered from 1 without gaps", e.Name()))
		}
		b, err := files.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			panic(err)
		}
		out = append(out, migrationFile{version: v, name: name, sql: string(b)})
	}
	return out
}()

func latest() int { return len(migrationFiles) }

func (d *Driver) versionTable() string { return d.prefix + "migrations" }

// bookkeeping creates the version table; it is part of every migration's
// SQL, so a schema applied by an external tool passes MigrateCheck.
func (d *Driver) bookkeeping() string {
	return "CREATE TABLE IF NOT EXISTS " + d.versionTable() + " (\n    version    INTEGER NOT NULL PRIMARY KEY,\n    name       TEXT    NOT NULL,\n    applied_at INTEGER NOT NULL DEFAULT " + nowExpr + "\n);\n"
}

// MigrationSQL returns every migration after version from, with this
// driver's table prefix, each ending with the row that records it. That row
// gives applied_at itself: a version table made by an older build defaults
// it with unixepoch('subsec'), which an operator's older sqlite3 lacks.
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

// catalogVersion is the migration that creates the owners catalog.
const catalogVersion = 3

// Migrate applies missing migrations in one immediate transaction, so two
// processes migrating at once serialize on SQLite's write lock and the
// second finds nothing to do. MigrateCheck only reads the version (and the
// migrations owner, once the catalog exists).
//
// MigrateUp is refused to any app but the catalog's migrations owner, even
// when nothing is left to apply, so a wrong app learns it at once; with no
// owner recorded, a named app that migrates up becomes the owner.
func (d *Driver) Migrate(ctx context.Context, p driver.MigrateParams) (driver.MigrateResult, error) {
	mode := p.Mode
	want := latest()
	if mode == driver.MigrateCheck {
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
		d.prepareInserts(ctx)
		return res, nil
	}
	if mode != driver.MigrateUp {
		return driver.MigrateResult{}, fmt.Errorf("mensageria/sqlite: unknown migrate mode %d", mode)
	}
	var res driver.MigrateResult
	err := d.write(ctx, func(w writer, now int64) error {
		have, err := d.version(ctx, w)
		if err != nil {
			return err
		}
		res = driver.MigrateResult{From: have, To: have, Latest: want}
		if have > want {
			return &SchemaVersionError{Have: have, Want: want}
		}
		if have >= catalogVersion {
			if res.Owner, err = d.migrationsOwner(ctx, w); err != nil {
				return err
			}
			if res.Owner != "" && res.Owner != p.App {
				return &driver.OwnerConflictError{App: p.App, Conflicts: []driver.Ownership{{
					Resource: driver.Resource{Kind: driver.ResourceMigrations, Name: driver.MigrationsName}, App: res.Owner}}}
			}
		}
		ms, err := d.MigrationSQL(have)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if _, err := w.ExecContext(ctx, m.SQL); err != nil {
				// A migration may switch a connection setting for a step
				// (003 renames in legacy mode); a failure halfway must not
				// leave it switched on a pooled connection.
				_, _ = w.ExecContext(context.WithoutCancel(ctx), "PRAGMA legacy_alter_table = OFF")
				return fmt.Errorf("mensageria/sqlite: migration %d (%s): %w", m.Version, m.Name, err)
			}
			res.Applied = append(res.Applied, m.Version)
			res.To = m.Version
		}
		if res.Owner == "" && p.App != "" && res.To >= catalogVersion {
			// An entry left unclaimed (app NULL) is taken like an absent one.
			if _, err := w.ExecContext(ctx, d.q.migrationsOwnerSet, string(driver.ResourceMigrations), driver.MigrationsName, p.App, now); err != nil {
				return wrap("recording the migrations owner", err)
			}
			res.Owner = p.App
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	d.prepareInserts(ctx)
	return res, nil
}

// migrationsOwner reads the app that owns the schema's migrations, "" when
// none is recorded.
func (d *Driver) migrationsOwner(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (string, error) {
	var app sql.NullString
	err := q.QueryRowContext(ctx, d.q.migrationsOwner, string(driver.ResourceMigrations), driver.MigrationsName).Scan(&app)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", wrap("reading the migrations owner", err)
	}
	return app.String, nil
}

func (d *Driver) version(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) (int, error) {
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
