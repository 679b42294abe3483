package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/xadm/mensageria/driver"
)

var _ driver.RoutePauser = (*Driver)(nil)

// PauseRoute records an operator's pause of one type.
func (d *Driver) PauseRoute(ctx context.Context, p driver.PauseRouteParams) (driver.RoutePause, error) {
	if err := driver.CheckPauseRoute(p); err != nil {
		return driver.RoutePause{}, err
	}
	var out driver.RoutePause
	err := d.write(ctx, func(w writer, _ int64) error {
		var err error
		out, err = scanRoutePause(w.QueryRowContext(ctx, d.q.routePauseSet, p.App, p.Type, p.PausedBy, p.Reason))
		return wrap("pause route", err)
	})
	return out, err
}

// ResumeRoute deletes the pause of typ.
func (d *Driver) ResumeRoute(ctx context.Context, typ string) (driver.RoutePause, bool, error) {
	var out driver.RoutePause
	found := false
	err := d.write(ctx, func(w writer, _ int64) error {
		var err error
		out, err = scanRoutePause(w.QueryRowContext(ctx, d.q.routePauseDelete, typ))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		found = err == nil
		return wrap("resume route", err)
	})
	return out, found, err
}

// RoutePauses lists the operators' pauses of app ("" for all).
func (d *Driver) RoutePauses(ctx context.Context, app string) ([]driver.RoutePause, error) {
	rows, err := d.db.QueryContext(ctx, d.q.routePauseList, app)
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
	p.PausedAt = time.UnixMicro(at)
	return p, err
}
