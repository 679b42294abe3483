package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/xadm/mensageria/driver"
)

// Register records what one app owns, in one transaction. See
// driver.Driver and queries/register_*.sql.
func (d *Driver) Register(ctx context.Context, p driver.RegisterParams) (driver.RegisterResult, error) {
	if p.App == "" {
		return driver.RegisterResult{}, errors.New("mensageria/postgres: register: the app name is required")
	}
	if err := driver.CheckApp(p.App); err != nil {
		return driver.RegisterResult{}, fmt.Errorf("mensageria/postgres: register: %w", err)
	}
	rs, err := normalize(p.Resources)
	if err != nil {
		return driver.RegisterResult{}, err
	}
	kinds, names, windows := make([]string, len(rs)), make([]string, len(rs)), make([]int64, len(rs))
	for i, r := range rs {
		kinds[i], names[i], windows[i] = string(r.Kind), r.Name, r.Window.Microseconds()
	}
	var res driver.RegisterResult
	err = retryDeadlock(ctx, func() error {
		res = driver.RegisterResult{}
		return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			// Whatever the connection says: ownership lost in a crash
			// would let another app take this app's types while its relay
			// claims their rows.
			if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
				return err
			}
			if len(rs) > 0 {
				if _, err := tx.Exec(ctx, d.q.registerInsert, kinds, names, windows, p.App); err != nil {
					return err
				}
				rows, err := tx.Query(ctx, d.q.registerLock, kinds, names)
				if err != nil {
					return err
				}
				current, err := pgx.CollectRows(rows, scanOwnership(false))
				if err != nil {
					return err
				}
				if len(current) < len(rs) {
					if current, err = d.unlocked(ctx, tx, kinds, names, current); err != nil {
						return err
					}
				}
				var conflicts []driver.Ownership
				for _, o := range current {
					if o.App != "" && o.App != p.App {
						conflicts = append(conflicts, o)
					}
				}
				if len(conflicts) > 0 {
					// Returning the error rolls back the entries inserted
					// above: a refused registration records nothing.
					return &driver.OwnerConflictError{App: p.App, Conflicts: conflicts}
				}
				if _, err := tx.Exec(ctx, d.q.registerAdopt, kinds, names, windows, p.App); err != nil {
					return err
				}
			}
			mine, err := d.owners(ctx, tx, p.App)
			if err != nil {
				return err
			}
			for _, o := range mine {
				listed := slices.ContainsFunc(rs, func(r driver.Resource) bool { return r.Kind == o.Kind && r.Name == o.Name })
				// The migrations entry is not registered at start but by
				// Migrate; it is no forgotten route.
				if !listed && o.Kind != driver.ResourceMigrations {
					res.Unlisted = append(res.Unlisted, o)
				}
			}
			return tx.QueryRow(ctx, "SELECT id FROM "+d.table("outbox_identity")).Scan(&res.OutboxID)
		})
	})
	var ce *driver.OwnerConflictError
	if err != nil && !errors.As(err, &ce) {
		return driver.RegisterResult{}, fmt.Errorf("mensageria/postgres: register %q: %w", p.App, err)
	}
	return res, err
}

// normalize checks the resources of a registration and sorts them by kind
// and name, each once.
// unlocked adds to the entries locked the ones the lock skipped, read
// without it (queries/register_read.sql): another app's, under row-level
// security.
func (d *Driver) unlocked(ctx context.Context, tx pgx.Tx, kinds, names []string, locked []driver.Ownership) ([]driver.Ownership, error) {
	rows, err := tx.Query(ctx, d.q.registerRead, kinds, names)
	if err != nil {
		return nil, err
	}
	all, err := pgx.CollectRows(rows, scanOwnership(false))
	if err != nil {
		return nil, err
	}
	for _, o := range all {
		if !slices.ContainsFunc(locked, func(l driver.Ownership) bool { return l.Kind == o.Kind && l.Name == o.Name }) {
			locked = append(locked, o)
		}
	}
	return locked, nil
}

func normalize(in []driver.Resource) ([]driver.Resource, error) {
	out := make([]driver.Resource, 0, len(in))
	for _, r := range in {
		if err := checkResource(r.Kind, r.Name); err != nil {
			return nil, err
		}
		if r.Window < 0 {
			return nil, fmt.Errorf("mensageria/postgres: register: consumer %q: negative window %s", r.Name, r.Window)
		}
		if r.Kind != driver.ResourceConsumer {
			r.Window = 0
		}
		if i := slices.IndexFunc(out, func(o driver.Resource) bool { return o.Kind == r.Kind && o.Name == r.Name }); i >= 0 {
			if out[i].Window != r.Window {
				return nil, fmt.Errorf("mensageria/postgres: register: %s %q listed twice, with windows %s and %s", r.Kind, r.Name, out[i].Window, r.Window)
			}
			continue
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b driver.Resource) int {
		if c := strings.Compare(string(a.Kind), string(b.Kind)); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out, nil
}

func checkResource(kind driver.ResourceKind, name string) error {
	switch kind {
	case driver.ResourceType, driver.ResourceConsumer, driver.ResourceKafkaTransactionalID, driver.ResourceMigrations:
	default:
		return fmt.Errorf("mensageria/postgres: unknown resource kind %q (want %s, %s, %s or %s)", kind,
			driver.ResourceType, driver.ResourceConsumer, driver.ResourceKafkaTransactionalID, driver.ResourceMigrations)
	}
	if name == "" {
		return fmt.Errorf("mensageria/postgres: a %s resource needs a name", kind)
	}
	return nil
}

// retryDeadlock runs fn again when the database broke a lock cycle by
// aborting it: registrations of overlapping sets lock in key order, but a
// Transfer or a hand-written statement may not.
func retryDeadlock(ctx context.Context, fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		var pe *pgconn.PgError
		if attempt == 3 || !errors.As(err, &pe) || (pe.Code != "40P01" && pe.Code != "40001") || ctx.Err() != nil {
			return err
		}
	}
}

// Owners lists the catalog. See driver.Driver.
func (d *Driver) Owners(ctx context.Context, app string) ([]driver.Ownership, error) {
	out, err := d.owners(ctx, d.pool, app)
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: owners: %w", err)
	}
	return out, nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func (d *Driver) owners(ctx context.Context, q querier, app string) ([]driver.Ownership, error) {
	rows, err := q.Query(ctx, d.q.owners, app)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanOwnership(true))
}

func scanOwnership(withWindow bool) pgx.RowToFunc[driver.Ownership] {
	return func(r pgx.CollectableRow) (driver.Ownership, error) {
		var o driver.Ownership
		var kind string
		var err error
		if withWindow {
			var us int64
			err = r.Scan(&kind, &o.Name, &o.App, &us, &o.Since)
			o.Window = time.Duration(us) * time.Microsecond
		} else {
			err = r.Scan(&kind, &o.Name, &o.App, &o.Since)
		}
		o.Kind = driver.ResourceKind(kind)
		return o, err
	}
}

// Transfer moves one resource between apps: a compare-and-set on its
// current owner. See driver.Driver.
func (d *Driver) Transfer(ctx context.Context, p driver.TransferParams) error {
	if err := checkResource(p.Kind, p.Name); err != nil {
		return err
	}
	if p.To != "" {
		if err := driver.CheckApp(p.To); err != nil {
			return fmt.Errorf("mensageria/postgres: transfer: %w", err)
		}
	}
	err := retryDeadlock(ctx, func() error {
		return pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			var owner string
			err := tx.QueryRow(ctx, d.q.transferLock, string(p.Kind), p.Name).Scan(&owner)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("mensageria/postgres: transfer of %s %q: %w", p.Kind, p.Name, driver.ErrNotOwned)
			}
			if err != nil {
				return err
			}
			if owner != p.From {
				return &driver.OwnerConflictError{App: p.From, Conflicts: []driver.Ownership{{
					Resource: driver.Resource{Kind: p.Kind, Name: p.Name}, App: owner}}}
			}
			_, err = tx.Exec(ctx, d.q.transferSet, string(p.Kind), p.Name, p.To)
			return err
		})
	})
	if err != nil && !errors.Is(err, driver.ErrNotOwned) && !errors.Is(err, driver.ErrOwnerConflict) {
		return fmt.Errorf("mensageria/postgres: transfer of %s %q: %w", p.Kind, p.Name, err)
	}
	return err
}
