package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
)

// migrations returns the embedded migrations, numbered from the file names
// (NNN_name.sql), with the schema filled in.
func (d *Driver) migrations() ([]driver.Migration, error) {
	entries, err := fs.ReadDir(files, "migrations")
	if err != nil {
		return nil, err
	}
	var out []driver.Migration
	for _, e := range entries {
		name := e.Name()
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("mensageria/postgres: migration file %q is not NNN_name.sql", name)
		}
		b, err := files.ReadFile(path.Join("migrations", name))
		if err != nil {
			return nil, err
		}
		out = append(out, driver.Migration{Version: v, Name: rest, SQL: d.expand(string(b))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// MigrationSQL returns the migrations after version from. Each one, and the
// bookkeeping row it needs, is what Migrate would run.
func (d *Driver) MigrationSQL(from int) ([]driver.Migration, error) {
	all, err := d.migrations()
	if err != nil {
		return nil, err
	}
	var out []driver.Migration
	for _, m := range all {
		if m.Version > from {
			m.SQL = d.versionTableSQL() + "\n" + m.SQL + "\n" + fmt.Sprintf(
				"INSERT INTO %s (version, name) VALUES (%d, '%s');\n", d.table("schema_migrations"), m.Version, m.Name)
			out = append(out, m)
		}
	}
	return out, nil
}

func (d *Driver) versionTableSQL() string {
	return "CREATE SCHEMA IF NOT EXISTS " + d.schema + ";\n" +
		"CREATE TABLE IF NOT EXISTS " + d.table("schema_migrations") +
		" (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());"
}

// lockKey is the advisory lock that serializes migrations of one schema
// across every process, so that two apps starting together never race to
// create the same table.
func (d *Driver) lockKey(purpose string) int64 {
	h := fnv.New64a()
	h.Write([]byte("mensageria\x00" + purpose + "\x00" + d.schema))
	return int64(h.Sum64())
}

// Migrate applies or checks the migrations under a session advisory lock
// held on one connection, so concurrent callers (two apps starting at once)
// wait for each other and then find nothing left to do. The migration runs
// in a transaction begun after the lock is granted, so it sees everything
// the previous holder committed, catalog included.
func (d *Driver) Migrate(ctx context.Context, p driver.MigrateParams) (driver.MigrateResult, error) {
	all, err := d.migrations()
	if err != nil {
		return driver.MigrateResult{}, err
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return driver.MigrateResult{}, fmt.Errorf("mensageria/postgres: migrate: %w", err)
	}
	defer conn.Release()
	key := d.lockKey("migrate")
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		return driver.MigrateResult{}, fmt.Errorf("mensageria/postgres: migrate lock: %w", err)
	}
	defer func() {
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(unlockCtx, "SELECT pg_advisory_unlock($1)", key); err != nil {
			// A session we cannot unlock must not go back to the pool
			// holding the lock.
			_ = conn.Conn().Close(unlockCtx)
		}
	}()
	var res driver.MigrateResult
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		return d.migrateIn(ctx, tx, p, all, &res)
	})
	return res, err
}

// migrateIn checks or applies the migrations all in tx, taken under the
// migration lock, filling res.
func (d *Driver) migrateIn(ctx context.Context, tx pgx.Tx, p driver.MigrateParams, all []driver.Migration, res *driver.MigrateResult) error {
	mode, latest := p.Mode, all[len(all)-1].Version
	current, err := d.currentVersion(ctx, tx)
	if err != nil {
		return err
	}
	res.From, res.To, res.Latest = current, current, latest
	if current > latest {
		return fmt.Errorf("%w: database %s is at version %d, this build knows up to %d", driver.ErrSchemaAhead, d.schema, current, latest)
	}
	owner, err := d.migrationsOwner(ctx, tx, current, mode == driver.MigrateUp)
	if err != nil {
		return err
	}
	res.Owner = owner
	if mode == driver.MigrateCheck {
		if current < latest {
			return fmt.Errorf("%w: schema %s is at version %d, this build needs %d (run `mensageria migrate up`, or apply `mensageria migrate sql`)",
				driver.ErrSchemaBehind, d.schema, current, latest)
		}
		return nil
	}
	// Refused even with nothing left to apply: the app that is not
	// the owner learns it on its first start, not on the next release.
	if owner != "" && owner != p.App {
		return &driver.OwnerConflictError{App: p.App, Conflicts: []driver.Ownership{{
			Resource: driver.Resource{Kind: driver.ResourceMigrations, Name: driver.MigrationsName}, App: owner}}}
	}
	if _, err := tx.Exec(ctx, d.versionTableSQL()); err != nil {
		return err
	}
	for _, m := range all {
		if m.Version <= current {
			continue
		}
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("mensageria/postgres: migration %03d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+d.table("schema_migrations")+" (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
			return err
		}
		res.Applied = append(res.Applied, m.Version)
		res.To = m.Version
	}
	if owner == "" && p.App != "" {
		// A row left with no app (written by hand) is taken too.
		if _, err := tx.Exec(ctx, "INSERT INTO "+d.table("owners")+` (kind, name, app) VALUES ('migrations', $1, $2)
				ON CONFLICT (kind, name) DO UPDATE SET app = excluded.app, since = now() WHERE owners.app IS NULL`,
			driver.MigrationsName, p.App); err != nil {
			return fmt.Errorf("mensageria/postgres: record the migrations owner: %w", err)
		}
		res.Owner = p.App
	}
	return nil
}

// catalogVersion is the migration that creates the owners table.
const catalogVersion = 2

// migrationsOwner reads the app that owns the schema's migrations ("" for
// none, or a schema older than the catalog), locking its row when the
// caller goes on to migrate. The migrate advisory lock already serializes
// migrations; the row lock also holds off a Transfer of it meanwhile.
func (d *Driver) migrationsOwner(ctx context.Context, tx pgx.Tx, current int, lock bool) (string, error) {
	if current < catalogVersion {
		return "", nil
	}
	q := "SELECT coalesce(app, '') FROM " + d.table("owners") + " WHERE kind = 'migrations' AND name = $1"
	if lock {
		q += " FOR UPDATE"
	}
	var owner string
	err := tx.QueryRow(ctx, q, driver.MigrationsName).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("mensageria/postgres: read the migrations owner: %w", err)
	}
	return owner, nil
}

// currentVersion looks the table up first: a failed SELECT would abort the
// surrounding transaction.
func (d *Driver) currentVersion(ctx context.Context, tx pgx.Tx) (int, error) {
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", d.table("schema_migrations")).Scan(&exists); err != nil {
		return 0, err
	}
	if !exists {
		return 0, nil
	}
	var v int
	err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+d.table("schema_migrations")).Scan(&v)
	return v, err
}
