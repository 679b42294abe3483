package mysql

import (
	"context"
	"database/sql"
	"errors"

	"github.com/xadm/mensageria/driver"
)

var _ driver.RoutePauser = (*Driver)(nil)

// PauseRoute records an operator's pause of one type; pausing it again
// replaces who and why and keeps paused_at. MySQL has no RETURNING: the
// row is read back in the same transaction.
func (d *Driver) PauseRoute(ctx context.Context, p driver.PauseRouteParams) (driver.RoutePause, error) {
	if err := driver.CheckPauseRoute(p); err != nil {
		return driver.RoutePause{}, err
	}
	var out driver.RoutePause
	err := d.write(ctx, func(w writer, now int64) error {
		if _, err := w.ExecContext(ctx, d.q.routePauseSet, p.Type, p.App, p.PausedBy, p.Reason, now); err != nil {
			return wrap("pause route", err)
		}
		var err error
		out, err = scanRoutePause(w.QueryRowContext(ctx, d.q.routePauseGet, p.Type))
		return wrap("pause route", err)
	})
	return out, err
}

// ResumeRoute deletes the pause of typ and returns it.
func (d *Driver) ResumeRoute(ctx context.Context, typ string) (driver.RoutePause, bool, error) {
	var out driver.RoutePause
	found := false
	err := d.write(ctx, func(w writer, _ int64) error {
		var err error
		out, err = scanRoutePause(w.QueryRowContext(ctx, d.q.routePauseLock, typ))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return wrap("resume route", err)
		}
		if _, err := w.ExecContext(ctx, d.q.routePauseDelete, typ); err != nil {
			return wrap("resume route", err)
		}
		found = true
		return nil
	})
	return out, found, err
}

// RoutePauses lists the operators' pauses of app ("" for all).
func (d *Driver) RoutePauses(ctx context.Context, app string) ([]driver.RoutePause, error) {
	rows, err := d.db.QueryContext(ctx, d.q.routePauseList, app, app)
	if err != nil {
		return nil, wrap("route pauses", err)
	}
	defer rows.Close()
	var out []driver.RoutePause
	for rows.Next() {
		p, err := scanRoutePause(rows)
		if err != nil {
			return nil, wrap("route pauses", err)
		}
		out = append(out, p)
	}
	return out, wrap("route pauses", rows.Err())
}

func scanRoutePause(r interface{ Scan(...any) error }) (driver.RoutePause, error) {
	var p driver.RoutePause
	var at int64
	err := r.Scan(&p.Type, &p.App, &p.PausedBy, &p.Reason, &at)
	p.PausedAt = fromMicros(at)
	return p, err
}
