package mysql

import (
	"context"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlkit"
)

// defaultPurgeBatch bounds one purge pass when the caller gives no batch.
const defaultPurgeBatch = 1000

// Purge deletes, in one transaction, at most p.Batch delivered outbox rows
// of p.Types older than p.DeliveredBefore (zero: every delivered row of
// them) and at most p.Batch inbox records of the consumers the catalog
// gives p.App, each older than that consumer's own window, with the
// applied inbox queue rows as old; a consumer without a window, another
// app's, or one nobody registered keeps every record. Per-minute delivered
// counts of p.Types older than a day go too. The statements are
// queries/purge_*.sql.
func (d *Driver) Purge(ctx context.Context, p driver.PurgeParams) (driver.PurgeResult, error) {
	batch := p.Batch
	if batch <= 0 {
		batch = defaultPurgeBatch
	}
	types := sqlkit.Dedupe(p.Types)
	var res driver.PurgeResult
	err := d.write(ctx, func(w writer, now int64) error {
		res = driver.PurgeResult{}
		if len(types) > 0 && p.DeliveredBefore >= 0 {
			r, err := w.ExecContext(ctx, withList(d.q.purgeOutbox, len(types)), append(sqlkit.Args(types), now-p.DeliveredBefore.Microseconds(), batch)...)
			if err != nil {
				return wrap("purge outbox", err)
			}
			n, _ := r.RowsAffected()
			res.Outbox = int(n)
		}
		if p.App != "" {
			cs, err := d.appConsumers(ctx, w, p.App)
			if err != nil {
				return err
			}
			if res.Inbox, err = d.purgeEach(ctx, w, d.q.purgeInbox, cs, now, batch); err != nil {
				return wrap("purge inbox", err)
			}
			if res.InboxQueue, err = d.purgeEach(ctx, w, d.q.purgeInboxQueue, cs, now, batch); err != nil {
				return wrap("purge inbox queue", err)
			}
		}
		if len(types) > 0 {
			_, err := w.ExecContext(ctx, withList(d.q.purgeCounts, len(types)), append(sqlkit.Args(types), now-24*time.Hour.Microseconds())...)
			return wrap("purge counts", err)
		}
		return nil
	})
	return res, err
}

// windowed is a consumer of the purging app, with its window in
// microseconds.
type windowed struct {
	name   string
	window int64
}

// appConsumers reads the consumers app owns that have a window: the ones
// whose records and applied queue rows its purge deletes.
func (d *Driver) appConsumers(ctx context.Context, w writer, app string) ([]windowed, error) {
	rows, err := w.QueryContext(ctx, d.q.purgeConsumers, app)
	if err != nil {
		return nil, wrap("purge inbox", err)
	}
	defer rows.Close()
	var cs []windowed
	for rows.Next() {
		var c windowed
		if err := rows.Scan(&c.name, &c.window); err != nil {
			return nil, wrap("purge inbox", err)
		}
		cs = append(cs, c)
	}
	return cs, wrap("purge inbox", rows.Err())
}

// purgeEach runs a DELETE of (consumer, before, limit) for each consumer,
// older than its window, until batch rows went.
func (d *Driver) purgeEach(ctx context.Context, w writer, q string, cs []windowed, now int64, batch int) (int, error) {
	total := 0
	for _, c := range cs {
		if total >= batch {
			break
		}
		r, err := w.ExecContext(ctx, q, c.name, now-c.window, batch-total)
		if err != nil {
			return total, err
		}
		n, _ := r.RowsAffected()
		total += int(n)
	}
	return total, nil
}
