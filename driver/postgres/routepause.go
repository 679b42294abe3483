package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
)

var _ driver.RoutePauser = (*Driver)(nil)

// PauseRoute records an operator's pause of one type. See
// queries/route_pause_set.sql.
func (d *Driver) PauseRoute(ctx context.Context, p driver.PauseRouteParams) (driver.RoutePause, error) {
	if err := driver.CheckPauseRoute(p); err != nil {
		return driver.RoutePause{}, err
	}
	rows, err := d.pool.Query(ctx, d.q.routePauseSet, p.App, p.Type, p.PausedBy, p.Reason)
	if err != nil {
		return driver.RoutePause{}, fmt.Errorf("mensageria/postgres: pause route: %w", err)
	}
	out, err := pgx.CollectExactlyOneRow(rows, scanRoutePause)
	if err != nil {
		return driver.RoutePause{}, fmt.Errorf("mensageria/postgres: pause route: %w", err)
	}
	return out, nil
}

// ResumeRoute deletes the pause of typ. See queries/route_pause_delete.sql.
func (d *Driver) ResumeRoute(ctx context.Context, typ string) (driver.RoutePause, bool, error) {
	rows, err := d.pool.Query(ctx, d.q.routePauseDelete, typ)
	if err != nil {
		return driver.RoutePause{}, false, fmt.Errorf("mensageria/postgres: resume route: %w", err)
	}
	out, err := pgx.CollectExactlyOneRow(rows, scanRoutePause)
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.RoutePause{}, false, nil
	}
	if err != nil {
		return driver.RoutePause{}, false, fmt.Errorf("mensageria/postgres: resume route: %w", err)
	}
	return out, true, nil
}

// RoutePauses lists the operators' pauses of app ("" for all). See
// queries/route_pause_list.sql.
func (d *Driver) RoutePauses(ctx context.Context, app string) ([]driver.RoutePause, error) {
	rows, err := d.pool.Query(ctx, d.q.routePauseList, app)
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: route pauses: %w", err)
	}
	out, err := pgx.CollectRows(rows, scanRoutePause)
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: route pauses: %w", err)
	}
	return out, nil
}

func scanRoutePause(r pgx.CollectableRow) (driver.RoutePause, error) {
	var p driver.RoutePause
	err := r.Scan(&p.Type, &p.App, &p.PausedBy, &p.Reason, &p.PausedAt)
	return p, err
}
