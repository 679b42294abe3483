package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
)

var _ driver.DeliveryHistory = (*Driver)(nil)

// DeliveredPerMinute reads the per-minute counts Settle keeps.
func (d *Driver) DeliveredPerMinute(ctx context.Context, types []string, since time.Duration) ([]driver.DeliveredMinute, error) {
	if len(types) == 0 {
		return nil, nil
	}
	b, err := files.ReadFile("queries/delivered_minutes.sql")
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: delivered per minute: %w", err)
	}
	rows, err := d.pool.Query(ctx, d.expand(string(b)), types, since)
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: delivered per minute: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (driver.DeliveredMinute, error) {
		var m driver.DeliveredMinute
		err := r.Scan(&m.Type, &m.Minute, &m.N)
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: delivered per minute: %w", err)
	}
	return out, nil
}

// Statement returns the SQL of queries/<name>.sql with the schema filled
// in, as the driver sends it: for tools that record the driver's plans
// (internal/bench's console scenario).
func (d *Driver) Statement(name string) (string, error) {
	b, err := files.ReadFile("queries/" + name + ".sql")
	if err != nil {
		return "", fmt.Errorf("mensageria/postgres: no statement %q: %w", name, err)
	}
	return d.expand(string(b)), nil
}
