package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/xadm/mensageria/driver"
)

// SetRouteStates records routes' states in one write transaction: each
// type's row replaced, and with p.Replace the app's rows of other types
// deleted.
func (d *Driver) SetRouteStates(ctx context.Context, p driver.RouteStatesParams) error {
	if len(p.States) == 0 && !p.Replace {
		return nil
	}
	return d.write(ctx, func(w writer, now int64) error {
		types := make([]string, len(p.States))
		for i, s := range p.States {
			types[i] = s.Type
			var until any
			if !s.Until.IsZero() {
				until = s.Until.UnixMicro()
			}
			var lastErr any
			if s.LastError != "" {
				lastErr = s.LastError
			}
			if _, err := w.ExecContext(ctx, d.q.routeStateSet, s.Type, s.App, s.Route, s.State, s.Since.UnixMicro(), until, max(s.Failures, 0), lastErr, now); err != nil {
				return wrap("route states", err)
			}
		}
		if p.Replace {
			if _, err := w.ExecContext(ctx, d.q.routeStatePrune, p.App, stringsJSON(types)); err != nil {
				return wrap("route states", err)
			}
		}
		return nil
	})
}

// RouteStates lists the recorded route states of app ("" for all).
func (d *Driver) RouteStates(ctx context.Context, app string) ([]driver.RouteState, error) {
	rows, err := d.db.QueryContext(ctx, d.q.routeStateList, app)
	if err != nil {
		return nil, wrap("route states", err)
	}
	defer rows.Close()
	var out []driver.RouteState
	for rows.Next() {
		var s driver.RouteState
		var since, updated int64
		var until sql.NullInt64
		if err := rows.Scan(&s.Type, &s.App, &s.Route, &s.State, &since, &until, &s.Failures, &s.LastError, &updated); err != nil {
			return nil, wrap("route states", err)
		}
		s.Since, s.UpdatedAt = time.UnixMicro(since), time.UnixMicro(updated)
		if until.Valid {
			s.Until = time.UnixMicro(until.Int64)
		}
		out = append(out, s)
	}
	return out, wrap("route states", rows.Err())
}
