package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/xadm/mensageria/driver"
)

// SetRouteStates records route states, one row per type; with p.Replace it
// deletes p.App's rows of the types not listed.
func (d *Driver) SetRouteStates(ctx context.Context, p driver.RouteStatesParams) error {
	if len(p.States) == 0 && !p.Replace {
		return nil
	}
	t := d.prefix + "route_state"
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
			if _, err := w.ExecContext(ctx, "INSERT INTO "+t+" (type, app, route, state, since, `until`, failures, last_error, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "+
				"ON DUPLICATE KEY UPDATE app = VALUES(app), route = VALUES(route), state = VALUES(state), since = VALUES(since), "+
				"`until` = VALUES(`until`), failures = VALUES(failures), last_error = VALUES(last_error), updated_at = VALUES(updated_at)",
				s.Type, s.App, s.Route, s.State, s.Since.UnixMicro(), until, max(s.Failures, 0), lastErr, now); err != nil {
				return wrap("route states", err)
			}
		}
		if p.Replace {
			// "type NOT IN (NULL)" matches no row, so a replace that keeps
			// no type deletes the app's rows without the list.
			q, args := "DELETE FROM "+t+" WHERE app = ?", []any{p.App}
			if len(types) > 0 {
				q, args = inList(q+" AND type NOT IN ", types, p.App)
			}
			if _, err := w.ExecContext(ctx, q, args...); err != nil {
				return wrap("route states", err)
			}
		}
		return nil
	})
}

// RouteStates lists the recorded route states, of one app or (app "") of
// all, sorted by type.
func (d *Driver) RouteStates(ctx context.Context, app string) ([]driver.RouteState, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT type, app, route, state, since, `until`, failures, COALESCE(last_error, ''), updated_at FROM "+d.prefix+"route_state WHERE ? = '' OR app = ? ORDER BY type", app, app)
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
