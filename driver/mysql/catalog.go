package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

// maxResourceName bounds a catalog name: the longest the library gives is
// a message type or a consumer, each at most 200 bytes; the rest is room.
const maxResourceName = 1000

// ResourceError names a catalog entry that Register or Transfer cannot take
// as given.
type ResourceError struct {
	Kind   driver.ResourceKind
	Name   string
	Reason string
}

func (e *ResourceError) Error() string {
	return fmt.Sprintf("mensageria/mysql: catalog entry %s %q: %s", e.Kind, e.Name, e.Reason)
}

func checkResource(k driver.ResourceKind, name string) error {
	switch k {
	case driver.ResourceType, driver.ResourceConsumer, driver.ResourceKafkaTransactionalID, driver.ResourceMigrations:
	default:
		return &ResourceError{Kind: k, Name: name, Reason: "unknown kind (want type, consumer, kafka_transactional_id or migrations)"}
	}
	switch {
	case name == "":
		return &ResourceError{Kind: k, Name: name, Reason: "empty name"}
	case len(name) > maxResourceName:
		return &ResourceError{Kind: k, Name: name[:40] + "…", Reason: fmt.Sprintf("name longer than %d bytes", maxResourceName)}
	case k == driver.ResourceMigrations && name != driver.MigrationsName:
		return &ResourceError{Kind: k, Name: name, Reason: fmt.Sprintf("the migrations entry is named %q", driver.MigrationsName)}
	}
	return nil
}

// windowUS is how a consumer's window is stored: NULL keeps its records
// forever. A positive window under a microsecond is one microsecond, not
// forever.
func windowUS(r driver.Resource) any {
	if r.Kind != driver.ResourceConsumer || r.Window <= 0 {
		return nil
	}
	return max(r.Window.Microseconds(), 1)
}

type resourceKey struct {
	kind driver.ResourceKind
	name string
}

// Register records, in one transaction, that p.App owns p.Resources. Two
// apps registering one resource at once serialize on its key: the second
// waits for the first's insert, then sees its entry and gets the conflict.
// See driver.Driver.
func (d *Driver) Register(ctx context.Context, p driver.RegisterParams) (driver.RegisterResult, error) {
	want, listed, err := checkRegistration(p)
	if err != nil {
		return driver.RegisterResult{}, err
	}
	var res driver.RegisterResult
	err = d.write(ctx, func(w writer, now int64) error {
		var err error
		res, err = d.register(ctx, w, now, p, want, listed)
		return err
	})
	if err != nil {
		return driver.RegisterResult{}, err
	}
	return res, nil
}

// checkRegistration validates p's resources and lists each once.
func checkRegistration(p driver.RegisterParams) ([]driver.Resource, map[resourceKey]driver.Resource, error) {
	if p.App == "" {
		return nil, nil, &ConfigError{Field: "app", Reason: "empty app name: every catalog entry names the app that owns it"}
	}
	if err := driver.CheckApp(p.App); err != nil {
		return nil, nil, fmt.Errorf("mensageria/mysql: register: %w", err)
	}
	listed := map[resourceKey]driver.Resource{}
	var want []driver.Resource
	for _, r := range p.Resources {
		if err := checkResource(r.Kind, r.Name); err != nil {
			return nil, nil, err
		}
		if r.Window < 0 {
			return nil, nil, &ResourceError{Kind: r.Kind, Name: r.Name, Reason: fmt.Sprintf("negative window %s (zero keeps records forever)", r.Window)}
		}
		k := resourceKey{r.Kind, r.Name}
		if prev, ok := listed[k]; ok {
			if windowUS(prev) != windowUS(r) {
				return nil, nil, &ResourceError{Kind: r.Kind, Name: r.Name, Reason: fmt.Sprintf("listed twice, with windows %s and %s", prev.Window, r.Window)}
			}
			continue
		}
		listed[k] = r
		want = append(want, r)
	}
	return want, listed, nil
}

// register records p in w, the body of Register.
func (d *Driver) register(ctx context.Context, w writer, now int64, p driver.RegisterParams, want []driver.Resource, listed map[resourceKey]driver.Resource) (driver.RegisterResult, error) {
	var res driver.RegisterResult
	var conflicts []driver.Ownership
	for _, r := range want {
		var app sql.NullString
		var win sql.NullInt64
		var since int64
		// Inserted unless present: two apps registering one new name at
		// once meet on its key instead of both finding it absent.
		ins, err := w.ExecContext(ctx, d.q.registerInsert, string(r.Kind), r.Name, p.App, windowUS(r), now)
		if err != nil {
			return res, wrap("register", err)
		}
		if n, _ := ins.RowsAffected(); n == 1 {
			continue
		}
		err = w.QueryRowContext(ctx, d.q.registerRead, string(r.Kind), r.Name).Scan(&app, &win, &since)
		switch {
		case err != nil:
		case !app.Valid: // unclaimed: the first app to register it adopts it
			_, err = w.ExecContext(ctx, d.q.registerAdopt, p.App, windowUS(r), now, string(r.Kind), r.Name)
		case app.String != p.App:
			conflicts = append(conflicts, ownership(r.Kind, r.Name, app, win, since))
		case r.Kind == driver.ResourceConsumer:
			// The owner's inbox is the one source of its window.
			_, err = w.ExecContext(ctx, d.q.registerWindow, windowUS(r), string(r.Kind), r.Name, windowUS(r))
		}
		if err != nil {
			return res, wrap("register", err)
		}
	}
	if len(conflicts) > 0 {
		return res, &driver.OwnerConflictError{App: p.App, Conflicts: conflicts}
	}
	mine, err := d.owners(ctx, w, p.App)
	if err != nil {
		return res, err
	}
	for _, o := range mine {
		// The migrations entry is not registered at start but by Migrate;
		// it is no forgotten route.
		if _, ok := listed[resourceKey{o.Kind, o.Name}]; !ok && o.Kind != driver.ResourceMigrations {
			res.Unlisted = append(res.Unlisted, o)
		}
	}
	res.OutboxID, err = d.outboxID(ctx, w)
	return res, err
}

func ownership(kind driver.ResourceKind, name string, app sql.NullString, win sql.NullInt64, since int64) driver.Ownership {
	o := driver.Ownership{Resource: driver.Resource{Kind: kind, Name: name}, App: app.String, Since: fromMicros(since)}
	if win.Valid {
		o.Window = time.Duration(win.Int64) * time.Microsecond
	}
	return o
}

func (d *Driver) outboxID(ctx context.Context, q interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) ([16]byte, error) {
	var s string
	if err := q.QueryRowContext(ctx, d.q.identity).Scan(&s); err != nil {
		return [16]byte{}, wrap("reading the outbox identity", err)
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return [16]byte{}, fmt.Errorf("mensageria/mysql: the outbox identity %q in %sidentity is not a UUID: %w", s, d.prefix, err)
	}
	return id, nil
}

// Owners lists the catalog, of one app or (app "") of all, in kind and name
// order (the names are VARBINARY, so the order is Go's byte order;
// queries/owners.sql, owners_of.sql).
func (d *Driver) Owners(ctx context.Context, app string) ([]driver.Ownership, error) {
	return d.owners(ctx, d.db, app)
}

func (d *Driver) owners(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, app string) ([]driver.Ownership, error) {
	query, args := d.q.owners, []any(nil)
	if app != "" {
		query, args = d.q.ownersOf, []any{app}
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, wrap("owners", err)
	}
	defer rows.Close()
	var out []driver.Ownership
	for rows.Next() {
		var kind, name string
		var a sql.NullString
		var win sql.NullInt64
		var since int64
		if err := rows.Scan(&kind, &name, &a, &win, &since); err != nil {
			return nil, wrap("owners", err)
		}
		out = append(out, ownership(driver.ResourceKind(kind), name, a, win, since))
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("owners", err)
	}
	return out, nil
}

// Transfer moves one entry from p.From to p.To, only if p.From still owns
// it (a compare-and-set, so two operators cannot both win). See
// driver.Driver.
func (d *Driver) Transfer(ctx context.Context, p driver.TransferParams) error {
	if err := checkResource(p.Kind, p.Name); err != nil {
		return err
	}
	if p.To != "" {
		if err := driver.CheckApp(p.To); err != nil {
			return fmt.Errorf("mensageria/mysql: transfer: %w", err)
		}
	}
	return d.write(ctx, func(w writer, now int64) error {
		var app sql.NullString
		var win sql.NullInt64
		var since int64
		err := w.QueryRowContext(ctx, d.q.transferLock, string(p.Kind), p.Name).Scan(&app, &win, &since)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("mensageria/mysql: transfer of %s %q: %w", p.Kind, p.Name, driver.ErrNotOwned)
		}
		if err != nil {
			return wrap("transfer", err)
		}
		if app.String != p.From {
			return &driver.OwnerConflictError{App: p.From, Conflicts: []driver.Ownership{ownership(p.Kind, p.Name, app, win, since)}}
		}
		if p.To == "" {
			_, err = w.ExecContext(ctx, d.q.transferDelete, string(p.Kind), p.Name)
		} else if p.To != app.String {
			_, err = w.ExecContext(ctx, d.q.transferSet, p.To, now, string(p.Kind), p.Name)
		}
		return wrap("transfer", err)
	})
}
