package postgres

import (
	"context"
	"fmt"
	"math"
	"slices"
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
	began := time.Now()
	plan := d.floors.plan(p.Types, ordered, began, epoch)
	b := relayTx(func(b *pgx.Batch) {
		// The estimate of a range between a floor and now() is so narrow
		// that a bitmap scan and a sort look cheaper than the ordered walk
		// that LIMIT stops early; the claim must be that walk.
		b.Queue("SET LOCAL enable_bitmapscan = off")
		b.Queue(d.q.claim, p.Types, p.Limit, p.Token, p.Lease, ordered, app, epoch, plan.ats, plan.ids)
	})
	br := d.pool.SendBatch(ctx, b)
	defer br.Close()
	for range relayTxPrologue + 1 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("mensageria/postgres: claim: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: claim: %w", err)
	}
	var claimNow time.Time
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (driver.Job, error) {
		// The times one by one, so that a row holding what no time.Time
		// can is returned unreadable (parked by the relay), not an error
		// that fails the whole batch (unreadable.go).
		var j driver.Job
		var t rowTimes
		err := r.Scan(&j.ID, &j.MessageID, &j.Type, &j.Key, &j.Payload, &j.Headers, &j.Attempt, &t.created, &t.available, &claimNow)
		t.into(&j)
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
	var last *driver.Job
	if len(jobs) > 0 {
		last = &jobs[len(jobs)-1]
	}
	d.floors.claimed(p.Types, ordered, plan, began, p.Lease, time.Since(began), len(jobs), p.Limit, last, claimNow)
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

// Settle records a batch's outcomes in one transaction and one round trip;
// every statement returns the ids it changed. Only when some row was left
// unchanged does a second query tell fenced rows from expired ones.
func (d *Driver) Settle(ctx context.Context, p driver.SettleParams) (driver.SettleResult, error) {
	var steps []settleStep
	if len(p.Delivered) > 0 {
		steps = append(steps, settleStep{d.q.settleDelivered, []any{p.Delivered, p.Token, p.KeepDelivered}})
	}
	if len(p.Retry) > 0 {
		ids := make([]int64, len(p.Retry))
		delays := make([]int64, len(p.Retry))
		errs := make([]string, len(p.Retry))
		routes := make([]string, len(p.Retry))
		uncounted := make([]bool, len(p.Retry))
		for i, r := range p.Retry {
			ids[i], delays[i], errs[i], routes[i], uncounted[i] = r.ID, r.Delay.Microseconds(), r.Error, r.Route, r.Uncounted
		}
		steps = append(steps, settleStep{d.q.settleRetry, []any{ids, p.Token, delays, errs, routes, uncounted}})
	}
	if len(p.Dead) > 0 {
		ids := make([]int64, len(p.Dead))
		errs := make([]string, len(p.Dead))
		routes := make([]string, len(p.Dead))
		for i, f := range p.Dead {
			ids[i], errs[i], routes[i] = f.ID, f.Error, f.Route
		}
		steps = append(steps, settleStep{d.q.settleDead, []any{ids, p.Token, errs, routes}})
	}
	if len(p.InDoubt) > 0 {
		ids := make([]int64, len(p.InDoubt))
		errs := make([]string, len(p.InDoubt))
		routes := make([]string, len(p.InDoubt))
		delays := make([]int64, len(p.InDoubt))
		for i, f := range p.InDoubt {
			ids[i], errs[i], routes[i], delays[i] = f.ID, f.Error, f.Route, max(f.ProbeAfter, 0).Microseconds()
		}
		steps = append(steps, settleStep{d.q.settleInDoubt, []any{ids, p.Token, errs, routes, delays}})
	}
	if len(p.Release) > 0 {
		steps = append(steps, settleStep{d.q.settleRelease, []any{p.Release, p.Token}})
	}
	if len(steps) == 0 {
		return driver.SettleResult{}, nil
	}
	changed, err := d.settle(ctx, steps)
	if err != nil {
		d.floors.settleFailed(time.Now())
		return driver.SettleResult{}, fmt.Errorf("mensageria/postgres: settle: %w", err)
	}
	var res driver.SettleResult
	var left []int64
	for _, id := range p.IDs() {
		if changed[id] {
			res.Settled = append(res.Settled, id)
		} else {
			left = append(left, id)
		}
	}
	if len(left) > 0 {
		res.Fenced, res.Expired = d.sortUnsettled(ctx, p.Token, left)
	}
	if len(res.Expired) > 0 || slices.ContainsFunc(p.Release, func(id int64) bool { return changed[id] }) {
		d.floors.rowsDue(time.Now())
	}
	return res, nil
}

type settleStep struct {
	sql  string
	args []any
}

// settle runs the steps in one relay transaction and returns the ids they
// changed.
func (d *Driver) settle(ctx context.Context, steps []settleStep) (map[int64]bool, error) {
	b := relayTx(func(b *pgx.Batch) {
		for _, s := range steps {
			b.Queue(s.sql, s.args...)
		}
	})
	br := d.pool.SendBatch(ctx, b)
	defer br.Close()
	for range relayTxPrologue {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	changed := map[int64]bool{}
	for range steps {
		rows, err := br.Query()
		if err != nil {
			return nil, err
		}
		var id int64
		_, err = pgx.ForEachRow(rows, []any{&id}, func() error { changed[id] = true; return nil })
		if err != nil {
			return nil, err
		}
	}
	if _, err := br.Exec(); err != nil { // COMMIT
		return nil, err
	}
	return changed, nil
}

// sortUnsettled splits rows a committed settle left unchanged into fenced
// (another token, or gone) and expired (still ours, lease run out). The
// settle is already recorded, so this runs even when ctx ended meanwhile
// (a relay stopping); should it fail all the same, the rows are reported
// expired: unchanged and left to be claimed again, which is true of both,
// without claiming that another relay owns them.
func (d *Driver) sortUnsettled(ctx context.Context, token int64, ids []int64) (fenced, expired []int64) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rows, err := d.pool.Query(ctx, d.q.settleSort, ids, token)
	if err != nil {
		return nil, ids
	}
	ours, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, ids
	}
	for _, id := range ids {
		if slices.Contains(ours, id) {
			expired = append(expired, id)
		} else {
			fenced = append(fenced, id)
		}
	}
	return fenced, expired
}

// Purge deletes one batch of each kind of one app's expired rows. See
// queries/purge_*.sql.
func (d *Driver) Purge(ctx context.Context, p driver.PurgeParams) (driver.PurgeResult, error) {
	batch := p.Batch
	if batch <= 0 {
		batch = 1000
	}
	var res driver.PurgeResult
	if len(p.Types) > 0 {
		tag, err := d.pool.Exec(ctx, d.q.purgeOutbox, p.DeliveredBefore, batch, p.Types)
		if err != nil {
			return res, fmt.Errorf("mensageria/postgres: purge outbox: %w", err)
		}
		res.Outbox = int(tag.RowsAffected())
		if _, err := d.pool.Exec(ctx, d.q.purgeCounts, p.Types); err != nil {
			return res, fmt.Errorf("mensageria/postgres: purge counts: %w", err)
		}
	}
	if p.App != "" {
		tag, err := d.pool.Exec(ctx, d.q.purgeInbox, p.App, batch)
		if err != nil {
			return res, fmt.Errorf("mensageria/postgres: purge inbox: %w", err)
		}
		res.Inbox = int(tag.RowsAffected())
		tag, err = d.pool.Exec(ctx, d.q.purgeInboxQueue, p.App, batch)
		if err != nil {
			return res, fmt.Errorf("mensageria/postgres: purge inbox queue: %w", err)
		}
		res.InboxQueue = int(tag.RowsAffected())
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
		var age, doubtAge float64
		err := r.Scan(&s.Type, &s.Owner, &s.Pending, &s.InFlight, &s.Dead, &s.DeliveredLastHr, &age, &s.InDoubt, &doubtAge, &s.Scheduled)
		s.OldestPending = ageOf(age)
		s.OldestInDoubt = ageOf(doubtAge)
		return s, err
	})
}

var _ driver.DueReporter = (*Driver)(nil)

// NextDue reports how long until the next row of types comes due. See
// queries/next_due.sql.
func (d *Driver) NextDue(ctx context.Context, types []string) (time.Duration, bool, error) {
	if len(types) == 0 {
		return 0, false, nil
	}
	var seconds *float64
	if err := d.pool.QueryRow(ctx, d.q.nextDue, types).Scan(&seconds); err != nil {
		return 0, false, fmt.Errorf("mensageria/postgres: next due: %w", err)
	}
	if seconds == nil {
		return 0, false, nil
	}
	return ageOf(*seconds), true, nil // a wait converts as an age does
}

// ageOf is an age in seconds as a Duration: none for a time in the future,
// and at most the longest Duration for one older than that (a row's
// created_at may be any year a timestamptz holds).
func ageOf(seconds float64) time.Duration {
	switch {
	case seconds <= 0:
		return 0
	case seconds >= float64(math.MaxInt64/int64(time.Second)):
		return math.MaxInt64
	}
	return time.Duration(seconds * float64(time.Second))
}
