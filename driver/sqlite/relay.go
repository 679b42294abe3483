package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlkit"
)

// Claim leases due rows of p.Types in one immediate transaction. Each type
// is scanned on its own index range (type, available_at) and the results
// merged, so a large backlog of other types costs nothing. See
// queries/claim.sql.
func (d *Driver) Claim(ctx context.Context, p driver.ClaimParams) ([]driver.Job, error) {
	types, err := sqlkit.ClaimTypes(p.Types, p.Limit, p.Lease)
	if len(types) == 0 || err != nil {
		return nil, wrap("claim", err)
	}
	ordered := make(map[string]bool, len(types))
	for _, t := range types {
		ordered[t] = false
	}
	for _, t := range p.OrderedTypes {
		if _, ok := ordered[t]; ok {
			ordered[t] = true
		}
	}
	byType, _ := json.Marshal(ordered) // strings and booleans always marshal
	var jobs []driver.Job
	err = d.write(ctx, func(w writer, now int64) error {
		if ok, err := d.fenced(ctx, w, p.Fence); !ok || err != nil {
			return wrap("claim fence", err) // deposed: claim nothing
		}
		until := now + p.Lease.Microseconds()
		rows, err := w.QueryContext(ctx, d.q.claim, now, p.Token, until, string(byType), p.Limit)
		if err != nil {
			return wrap("claim", err)
		}
		jobs, err = scanJobs(rows, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	// RETURNING follows no particular order; deliver oldest first.
	slices.SortFunc(jobs, func(a, b driver.Job) int { return cmp.Compare(a.ID, b.ID) })
	return jobs, nil
}

// fenced reports whether a claim under fence f may go on, reading the
// app's lease row in the claim's transaction (queries/claim_fence.sql):
// always without a fence; with one, only while its epoch is the row's and
// the lease was not released.
func (d *Driver) fenced(ctx context.Context, w writer, f *driver.Fence) (bool, error) {
	if f == nil {
		return true, nil
	}
	var epoch int64
	var holder string
	err := w.QueryRowContext(ctx, d.q.claimFence, f.App).Scan(&epoch, &holder)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	}
	return epoch == f.Epoch && holder != "", nil
}

// Settle records the outcomes of one claimed batch in one transaction; each
// update is guarded by the token and the lease. The rows it did not change
// are sorted by one more read in the same transaction: gone or leased to
// another token is Fenced, still ours but past the lease is Expired.
func (d *Driver) Settle(ctx context.Context, p driver.SettleParams) (driver.SettleResult, error) {
	all := p.IDs()
	if len(all) == 0 {
		return driver.SettleResult{}, nil
	}
	var res driver.SettleResult
	err := d.write(ctx, func(w writer, now int64) error {
		var err error
		res, err = sqlkit.Settle(all, sqlkit.SettleSteps{
			Change: func(s *sqlkit.Settlement) error { return d.settle(ctx, w, now, p, s) },
			Count: func(perType map[string]int64) error {
				return sqlkit.CountDelivered(ctx, w, d.q.deliveredCount, perType, now)
			},
			Expired: func(rest []int64) (*sql.Rows, error) {
				return w.QueryContext(ctx, d.q.settleSort, int64sJSON(rest), p.Token, now)
			},
		}, wrap)
		return err
	})
	if err != nil {
		return driver.SettleResult{}, err
	}
	return res, nil
}

// settle runs the statements of p's outcomes, each ending in RETURNING
// id, type, and gives s what each changed, in the order of
// SettleParams.IDs, so that a row listed twice takes its first outcome
// (the first leaves it no longer leased to the token). Delivered rows are
// deleted (or, kept, marked); the retries, the dead and the rows left in
// doubt take one statement a row, each with its own time, error and
// route; released rows get their attempt back (they were not attempted).
func (d *Driver) settle(ctx context.Context, w writer, now int64, p driver.SettleParams, s *sqlkit.Settlement) error {
	run := func(q string, delivered bool, args ...any) error {
		rows, err := w.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		_, err = s.Read(rows, delivered)
		return err
	}
	if len(p.Delivered) > 0 {
		q := d.q.settleDelivered
		if p.KeepDelivered {
			q = d.q.settleDeliveredKept
		}
		if err := run(q, true, int64sJSON(p.Delivered), p.Token, now); err != nil {
			return err
		}
	}
	for _, r := range p.Retry {
		back := 0
		if r.Uncounted {
			back = 1
		}
		if err := run(d.q.settleRetry, false, r.ID, p.Token, now, now+max(r.Delay, 0).Microseconds(), back, r.Error, r.Route); err != nil {
			return err
		}
	}
	for _, f := range p.Dead {
		if err := run(d.q.settleDead, false, f.ID, p.Token, now, f.Error, f.Route); err != nil {
			return err
		}
	}
	for _, f := range p.InDoubt {
		if err := run(d.q.settleInDoubt, false, f.ID, p.Token, now, now+max(f.ProbeAfter, 0).Microseconds(), f.Error, f.Route); err != nil {
			return err
		}
	}
	if len(p.Release) > 0 {
		return run(d.q.settleRelease, false, int64sJSON(p.Release), p.Token, now)
	}
	return nil
}

var _ driver.DueReporter = (*Driver)(nil)

// NextDue reports how long until the earliest pending row of types that is
// not due yet comes due, on the database clock (queries/next_due.sql,
// which reads the clock too).
func (d *Driver) NextDue(ctx context.Context, types []string) (time.Duration, bool, error) {
	types = sqlkit.Dedupe(types)
	if len(types) == 0 {
		return 0, false, nil
	}
	var next sql.NullInt64
	var now int64
	if err := d.db.QueryRowContext(ctx, d.q.nextDue, stringsJSON(types)).Scan(&next, &now); err != nil {
		return 0, false, wrap("next due", err)
	}
	if !next.Valid {
		return 0, false, nil
	}
	return time.Duration(next.Int64-now) * time.Microsecond, true, nil
}
