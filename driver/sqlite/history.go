package sqlite

import (
	"context"
	"encoding/json"
	"time"

	"github.com/xadm/mensageria/driver"
)

var _ driver.DeliveryHistory = (*Driver)(nil)

// DeliveredPerMinute reads the per-minute counts Settle keeps.
func (d *Driver) DeliveredPerMinute(ctx context.Context, types []string, since time.Duration) ([]driver.DeliveredMinute, error) {
	if len(types) == 0 {
		return nil, nil
	}
	list, err := json.Marshal(types)
	if err != nil {
		return nil, wrap("delivered per minute", err)
	}
	rows, err := d.db.QueryContext(ctx, d.q.deliveredMinutes, string(list), since.Microseconds())
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
