package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlkit"
)

// SetRouteStates records route states, one row per type
// (queries/route_state_set.sql); with p.Replace it deletes p.App's rows of
// the types not listed (route_state_prune.sql), all of them when none is.
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
			// With no type the list is NULL, and the statement clears
			// the app's rows (queries/route_state_prune.sql).
			if _, err := w.ExecContext(ctx, withList(d.q.routeStatePrune, len(types)), sqlkit.Args(types, p.App)...); err != nil {
				return wrap("route states", err)
			}
		}
		return nil
	})
}

// RouteStates lists the recorded route states, of one app or (app "") of
// all, sorted by type.
func (d *Driver) RouteStates(ctx context.Context, app string) ([]driver.RouteState, error) {
	rows, err := d.db.QueryContext(ctx, d.q.routeStateList, app, app)
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
