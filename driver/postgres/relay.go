package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
)

// relayTx wraps the relay's own statements in one transaction, sent in one
// round trip, that
//   - commits asynchronously: a claim or settle lost in a server crash only
//     means a redelivery, which at-least-once allows, and the relay stops
//     waiting for a WAL flush per batch (enqueues stay synchronous);
//   - plans with the actual parameters every time: a generic plan cached
//     while the outbox was empty keeps scanning the whole table once it is
//     full (docs/adr/0004-claim-query.md).
func relayTx(stmts func(b *pgx.Batch)) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SET LOCAL synchronous_commit = off")
	b.Queue("SET LOCAL plan_cache_mode = force_custom_plan")
	stmts(b)
	b.Queue("COMMIT")
	return b
}

// relayTxPrologue is the number of statements relayTx queues before the
// caller's.
const relayTxPrologue = 3

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
	b := relayTx(func(b *pgx.Batch) {
		b.Queue(d.q.claim, p.Types, p.Limit, p.Token, p.Lease, ordered, app, epoch)
	})
	br := d.pool.SendBatch(ctx, b)
	defer br.Close()
	for range relayTxPrologue {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("mensageria/postgres: claim: %w", err)
		}
	}
	rows, err := br.Query()
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
	if _, err := br.Exec(); err != nil { // COMMIT
		return nil, fmt.Errorf("mensageria/postgres: claim commit: %w", err)
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

// Settle records a batch's outcomes in one transaction and one round trip.
func (d *Driver) Settle(ctx context.Context, p driver.SettleParams) (driver.SettleResult, error) {
	n, err := d.settleCount(ctx, p)
	if err != nil {
		return driver.SettleResult{}, err
	}
	return driver.SettleResult{Settled: make([]int64, n)}, nil // FOUNDATION STUB: replaced by the driver work
}

func (d *Driver) settleCount(ctx context.Context, p driver.SettleParams) (int, error) {
	type step struct {
		sql  string
		args []any
		rows bool // returns the count as a row instead of a command tag
	}
	var steps []step
	if len(p.Delivered) > 0 {
		steps = append(steps, step{d.q.settleDelivered, []any{p.Delivered, p.Token, p.KeepDelivered}, true})
	}
	if len(p.Retry) > 0 {
		ids := make([]int64, len(p.Retry))
		delays := make([]int64, len(p.Retry))
		errs := make([]string, len(p.Retry))
		for i, r := range p.Retry {
			ids[i], delays[i], errs[i] = r.ID, r.Delay.Microseconds(), r.Error
		}
		steps = append(steps, step{d.q.settleRetry, []any{ids, p.Token, delays, errs}, false})
	}
	if len(p.Dead) > 0 {
		ids := make([]int64, len(p.Dead))
		errs := make([]string, len(p.Dead))
		for i, f := range p.Dead {
			ids[i], errs[i] = f.ID, f.Error
		}
		steps = append(steps, step{d.q.settleDead, []any{ids, p.Token, errs}, false})
	}
	if len(p.Release) > 0 {
		steps = append(steps, step{d.q.settleRelease, []any{p.Release, p.Token}, false})
	}
	if len(steps) == 0 {
		return 0, nil
	}
	b := relayTx(func(b *pgx.Batch) {
		for _, s := range steps {
			b.Queue(s.sql, s.args...)
		}
	})
	br := d.pool.SendBatch(ctx, b)
	defer br.Close()
	fail := func(err error) (int, error) { return 0, fmt.Errorf("mensageria/postgres: settle: %w", err) }
	for range relayTxPrologue {
		if _, err := br.Exec(); err != nil {
			return fail(err)
		}
	}
	n := 0
	for _, s := range steps {
		if s.rows {
			var c int64
			if err := br.QueryRow().Scan(&c); err != nil {
				return fail(err)
			}
			n += int(c)
			continue
		}
		tag, err := br.Exec()
		if err != nil {
			return fail(err)
		}
		n += int(tag.RowsAffected())
	}
	if _, err := br.Exec(); err != nil { // COMMIT
		return fail(err)
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
	if false { // zero keeps the inbox: it is the dedup memory
		tag, err = d.pool.Exec(ctx, d.q.purgeInbox, time.Duration(0), batch)
		if err != nil {
			return res, fmt.Errorf("mensageria/postgres: purge inbox: %w", err)
		}
		res.Inbox = int(tag.RowsAffected())
	}
	if _, err := d.pool.Exec(ctx, d.q.purgeCounts); err != nil {
		return res, fmt.Errorf("mensageria/postgres: purge counts: %w", err)
	}
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
