package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
)

// SetRouteStates records routes' states in one transaction. See
// queries/route_state_*.sql.
func (d *Driver) SetRouteStates(ctx context.Context, p driver.RouteStatesParams) error {
	n := len(p.States)
	types, apps, routes, states, errs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	since, until := make([]time.Time, n), make([]*time.Time, n)
	failures := make([]int32, n)
	for i, s := range p.States {
		types[i], apps[i], routes[i], states[i], errs[i] = s.Type, s.App, s.Route, s.State, s.LastError
		since[i], failures[i] = s.Since, int32(min(max(s.Failures, 0), 1<<31-1))
		if !s.Until.IsZero() {
			u := s.Until
			until[i] = &u
		}
	}
	b := &pgx.Batch{}
	if n > 0 {
		b.Queue(d.q.routeStateSet, types, apps, routes, states, since, until, failures, errs)
	}
	if p.Replace {
		b.Queue(d.q.routeStatePrune, p.App, types)
	}
	if b.Len() == 0 {
		return nil
	}
	// A pgx batch outside a transaction runs as one implicit transaction.
	if err := d.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("mensageria/postgres: route states: %w", err)
	}
	return nil
}

// RouteStates lists the recorded route states of app ("" for all).
func (d *Driver) RouteStates(ctx context.Context, app string) ([]driver.RouteState, error) {
	rows, err := d.pool.Query(ctx, d.q.routeStateList, app)
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: route states: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (driver.RouteState, error) {
		var s driver.RouteState
		var until *time.Time
		err := r.Scan(&s.Type, &s.App, &s.Route, &s.State, &s.Since, &until, &s.Failures, &s.LastError, &s.UpdatedAt)
		if until != nil {
			s.Until = *until
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: route states: %w", err)
	}
	return out, nil
}
