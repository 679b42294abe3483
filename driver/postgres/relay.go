package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
)

// Claim leases due rows to p.Token. See queries/claim.sql.
func (d *Driver) Claim(ctx context.Context, p driver.ClaimParams) ([]driver.Job, error) {
	if len(p.Types) == 0 || p.Limit <= 0 {
		return nil, nil
	}
	ordered := make([]bool, len(p.Types))
	for i, t := range p.Types {
		for _, o := range p.OrderedTypes {
			if t == o {
				ordered[i] = true
			}
		}
	}
	app, epoch := "", int64(0)
	if p.Fence != nil {
		app, epoch = p.Fence.App, p.Fence.Epoch
	}
	rows, err := d.pool.Query(ctx, d.q.claim, pgx.QueryExecModeExec,
		p.Types, p.Limit, p.Token, p.Lease, ordered, app, epoch)
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: claim: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (driver.Job, error) {
		var j driver.Job
		err := r.Scan(&j.ID, &j.MessageID, &j.Type, &j.Key, &j.Payload, &j.Headers, &j.Attempt, &j.CreatedAt, &j.AvailableAt)
		j.State = driver.StatePending
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: claim: %w", err)
	}
	// RETURNING comes in no particular order; deliver in claim order.
	sortJobs(jobs)
	return jobs, nil
}

func sortJobs(jobs []driver.Job) {
	for i := 1; i < len(jobs); i++ {
		for k := i; k > 0 && less(&jobs[k], &jobs[k-1]); k-- {
			jobs[k], jobs[k-1] = jobs[k-1], jobs[k]
		}
	}
}

func less(a, b *driver.Job) bool {
	if !a.AvailableAt.Equal(b.AvailableAt) {
		return a.AvailableAt.Before(b.AvailableAt)
	}
	return a.ID < b.ID
}

// Settle records a batch's outcomes in one round trip and one implicit
// transaction.
func (d *Driver) Settle(ctx context.Context, p driver.SettleParams) (int, error) {
	b := &pgx.Batch{}
	if len(p.Delivered) > 0 {
		b.Queue(d.q.settleDelivered, p.Delivered, p.Token)
	}
	if len(p.Retry) > 0 {
		ids := make([]int64, len(p.Retry))
		delays := make([]int64, len(p.Retry))
		errs := make([]string, len(p.Retry))
		for i, r := range p.Retry {
			ids[i], delays[i], errs[i] = r.ID, r.Delay.Microseconds(), r.Error
		}
		b.Queue(d.q.settleRetry, ids, p.Token, delays, errs)
	}
	if len(p.Dead) > 0 {
		ids := make([]int64, len(p.Dead))
		errs := make([]string, len(p.Dead))
		for i, f := range p.Dead {
			ids[i], errs[i] = f.ID, f.Error
		}
		b.Queue(d.q.settleDead, ids, p.Token, errs)
	}
	if len(p.Release) > 0 {
		b.Queue(d.q.settleRelease, p.Release, p.Token)
	}
	if b.Len() == 0 {
		return 0, nil
	}
	br := d.pool.SendBatch(ctx, b)
	n := 0
	for i := 0; i < b.Len(); i++ {
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return 0, fmt.Errorf("mensageria/postgres: settle: %w", err)
		}
		n += int(tag.RowsAffected())
	}
	if err := br.Close(); err != nil {
		return 0, fmt.Errorf("mensageria/postgres: settle: %w", err)
	}
	return n, nil
}

// Purge deletes one batch of each kind of expired row.
func (d *Driver) Purge(ctx context.Context, p driver.PurgeParams) (driver.PurgeResult, error) {
	batch := p.Batch
	if batch <= 0 {
		batch = 1000
	}
	var res driver.PurgeResult
	tag, err := d.pool.Exec(ctx, d.q.purgeOutbox, p.DeliveredBefore, batch)
	if err != nil {
		return res, fmt.Errorf("mensageria/postgres: purge outbox: %w", err)
	}
	res.Outbox = int(tag.RowsAffected())
	tag, err = d.pool.Exec(ctx, d.q.purgeInbox, p.InboxBefore, batch)
	if err != nil {
		return res, fmt.Errorf("mensageria/postgres: purge inbox: %w", err)
	}
	res.Inbox = int(tag.RowsAffected())
	return res, nil
}

// Stats reports the outbox per type.
func (d *Driver) Stats(ctx context.Context) ([]driver.TypeStats, error) {
	rows, err := d.pool.Query(ctx, d.q.stats)
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: stats: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (driver.TypeStats, error) {
		var s driver.TypeStats
		var age float64
		err := r.Scan(&s.Type, &s.Pending, &s.InFlight, &s.Dead, &s.DeliveredLastHr, &age)
		s.OldestPending = time.Duration(age * float64(time.Second))
		return s, err
	})
}
