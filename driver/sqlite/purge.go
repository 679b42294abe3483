package sqlite

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
// gives p.App, each older than that consumer's own window; a consumer
// without a window, another app's, or one nobody registered keeps every
// record. Per-minute delivered counts of p.Types older than a day go too.
// See queries/purge_*.sql.
func (d *Driver) Purge(ctx context.Context, p driver.PurgeParams) (driver.PurgeResult, error) {
	batch := p.Batch
	if batch <= 0 {
		batch = defaultPurgeBatch
	}
	types := stringsJSON(sqlkit.Dedupe(p.Types))
	var res driver.PurgeResult
	err := d.write(ctx, func(w writer, now int64) error {
		res = driver.PurgeResult{}
		if len(p.Types) > 0 && p.DeliveredBefore >= 0 {
			r, err := w.ExecContext(ctx, d.q.purgeOutbox, types, now-p.DeliveredBefore.Microseconds(), batch)
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
			if res.Inbox, err = d.purgeInbox(ctx, w, cs, now, batch); err != nil {
				return err
			}
			if res.InboxQueue, err = d.purgeInboxQueue(ctx, w, cs, now, batch); err != nil {
				return err
			}
		}
		if len(p.Types) > 0 {
			_, err := w.ExecContext(ctx, d.q.purgeCounts, types, now-24*time.Hour.Microseconds())
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

// purgeInbox deletes up to batch records of app's consumers, each one's
// oldest first on the (consumer, received_at) index, after its window.
func (d *Driver) purgeInbox(ctx context.Context, w writer, cs []windowed, now int64, batch int) (int, error) {
	return purgeEach(ctx, w, d.q.purgeInbox, "purge inbox", cs, now, batch)
}

// purgeInboxQueue deletes up to batch applied queue rows of the consumers
// app owns, each once received longer ago than its window.
func (d *Driver) purgeInboxQueue(ctx context.Context, w writer, cs []windowed, now int64, batch int) (int, error) {
	return purgeEach(ctx, w, d.q.purgeInboxQueue, "purge inbox queue", cs, now, batch)
}

// purgeEach runs query, a delete of consumer ?1's rows before ?2 up to ?3
// of them, for each consumer of cs past its window, until batch rows went.
func purgeEach(ctx context.Context, w writer, query, op string, cs []windowed, now int64, batch int) (int, error) {
	total := 0
	for _, c := range cs {
		if total >= batch {
			break
		}
		r, err := w.ExecContext(ctx, query, c.name, now-c.window, batch-total)
		if err != nil {
			return total, wrap(op, err)
		}
		n, _ := r.RowsAffected()
		total += int(n)
	}
	return total, nil
}
