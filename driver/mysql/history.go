package mysql

import (
	"context"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlkit"
)

var _ driver.DeliveryHistory = (*Driver)(nil)

// DeliveredPerMinute reads queries/delivered_minutes.sql.
func (d *Driver) DeliveredPerMinute(ctx context.Context, types []string, since time.Duration) ([]driver.DeliveredMinute, error) {
	types = sqlkit.Dedupe(types)
	if len(types) == 0 {
		return nil, nil
	}
	args := make([]any, 0, len(types)+1)
	for _, t := range types {
		args = append(args, t)
	}
	rows, err := d.db.QueryContext(ctx, withList(d.q.deliveredMinutes, len(types)), append(args, since.Microseconds())...)
	if err != nil {
		return nil, wrap("delivered per minute", err)
	}
	defer rows.Close()
	var out []driver.DeliveredMinute
	for rows.Next() {
		var m driver.DeliveredMinute
		var minute int64
		if err := rows.Scan(&m.Type, &minute, &m.N); err != nil {
			return nil, wrap("delivered per minute", err)
		}
		m.Minute = time.UnixMicro(minute).UTC()
		out = append(out, m)
	}
	return out, wrap("delivered per minute", rows.Err())
}
