package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlkit"
)

// perTypeLimit is how many types a claim scans one by one, each on its own
// index range (queries/claim.sql); beyond it one IN-list scan is used
// (queries/claim_many.sql).
const perTypeLimit = 64

// fenced reports whether the app's election still gives p.Fence's epoch a
// holder, reading the lease row with a shared lock
// (queries/claim_fence.sql): a new leader's epoch waits for this claim to
// commit, so no claim of a deposed leader commits after its successor
// took over.
func (d *Driver) fenced(ctx context.Context, w writer, f *driver.Fence) (bool, error) {
	if f == nil {
		return true, nil
	}
	var epoch int64
	var holder string
	err := w.QueryRowContext(ctx, d.q.claimFence, f.App).Scan(&epoch, &holder)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, wrap("claim fence", err)
	}
	return epoch == f.Epoch && holder != "", nil
}

// Claim leases due rows of p.Types in one transaction: each type's due rows
// are locked with FOR UPDATE SKIP LOCKED on its own index range, so
// concurrent claimers take different rows and a backlog of other types
// costs nothing (queries/claim.sql, claim_ordered.sql, claim_many.sql),
// then leased (claim_lease.sql) and read back (claimed_rows.sql).
func (d *Driver) Claim(ctx context.Context, p driver.ClaimParams) ([]driver.Job, error) {
	types, err := sqlkit.ClaimTypes(p.Types, p.Limit, p.Lease)
	if len(types) == 0 || err != nil {
		return nil, wrap("claim", err)
	}
	ordered := map[string]bool{}
	for _, t := range p.OrderedTypes {
		ordered[t] = true
	}
	var jobs []driver.Job
	err = d.write(ctx, func(w writer, now int64) error {
		jobs = nil
		if ok, err := d.fenced(ctx, w, p.Fence); !ok || err != nil {
			return err
		}
		ids, err := d.due(ctx, w, p.Limit, types, ordered, now)
		if err != nil || len(ids) == 0 {
			return err
		}
		until := now + p.Lease.Microseconds()
		if _, err := w.ExecContext(ctx, withList(d.q.claimLease, len(ids)), sqlkit.Args(ids, p.Token, until, until)...); err != nil {
			return wrap("claim", err)
		}
		jobs, err = d.jobsByID(ctx, w, ids, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

// due locks and returns, oldest first, up to limit due pending rows of
// types not marked by an at-most-once attempt; an ordered type's only at
// the head of its key.
func (d *Driver) due(ctx context.Context, w writer, limit int, types []string, ordered map[string]bool, now int64) ([]int64, error) {
	type cand struct{ at, id int64 }
	var cands []cand
	scan := func(q string, args ...any) error {
		rows, err := w.QueryContext(ctx, q, args...)
		if err != nil {
			return wrap("claim", err)
		}
		defer rows.Close()
		for rows.Next() {
			var c cand
			if err := rows.Scan(&c.id, &c.at); err != nil {
				return wrap("claim", err)
			}
			cands = append(cands, c)
		}
		return wrap("claim", rows.Err())
	}
	if len(types) <= perTypeLimit {
		for _, t := range types {
			q := d.q.claim
			if ordered[t] {
				q = d.q.claimOrdered
			}
			if err := scan(q, now, t, limit); err != nil {
				return nil, err
			}
		}
	} else {
		var plain, ord []string
		for _, t := range types {
			if ordered[t] {
				ord = append(ord, t)
			} else {
				plain = append(plain, t)
			}
		}
		args := append(sqlkit.Args(ord, sqlkit.Args(plain, now)...), limit)
		if err := scan(withLists(d.q.claimMany, len(plain), len(ord)), args...); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	// The rows locked beyond limit stay locked, untouched, until the
	// commit a few statements later.
	ids := make([]int64, 0, min(len(cands), limit))
	for _, c := range cands[:min(len(cands), limit)] {
		ids = append(ids, c.id)
	}
	return ids, nil
}

// jobsByID reads the rows of ids in id order (queries/claimed_rows.sql).
func (d *Driver) jobsByID(ctx context.Context, w writer, ids []int64, now int64) ([]driver.Job, error) {
	rows, err := w.QueryContext(ctx, withList(d.q.claimedRows, len(ids)), sqlkit.Args(ids, now)...)
	if err != nil {
		return nil, wrap("claim", err)
	}
	return scanJobs(rows, false)
}

// Settle records the outcomes of one claimed batch in one transaction;
// each change locks its rows still leased to the token under a live lease
// (queries/settle_lock.sql) and changes those only. The rows it did not
// change are sorted by one more read (queries/settle_sort.sql): gone or
// leased to another token is Fenced, still ours but past the lease is
// Expired.
func (d *Driver) Settle(ctx context.Context, p driver.SettleParams) (driver.SettleResult, error) {
	all := p.IDs()
	if len(all) == 0 {
		return driver.SettleResult{}, nil
	}
	var res driver.SettleResult
	err := d.write(ctx, func(w writer, now int64) error {
		var err error
		res, err = sqlkit.Settle(all, sqlkit.SettleSteps{
			Change: func(s *sqlkit.Settlement) error {
				return (&settlement{d: d, ctx: ctx, w: w, now: now, p: p, s: s}).change()
			},
			Count: func(perType map[string]int64) error {
				return sqlkit.CountDelivered(ctx, w, d.q.deliveredCount, perType, now)
			},
			Expired: func(rest []int64) (*sql.Rows, error) {
				return w.QueryContext(ctx, withList(d.q.settleSort, len(rest)), append(sqlkit.Args(rest), p.Token, now)...)
			},
		}, wrap)
		return err
	})
	if err != nil {
		return driver.SettleResult{}, err
	}
	return res, nil
}

// settlement is one Settle's transaction; s is the bookkeeping of the
// rows it changed so far.
type settlement struct {
	d   *Driver
	ctx context.Context
	w   writer
	now int64
	p   driver.SettleParams
	s   *sqlkit.Settlement
}

// change records p's outcomes in the order of SettleParams.IDs, so that a
// row listed twice takes its first outcome (the first leaves it no longer
// leased to the token): delivered rows are deleted (or, kept, marked),
// then the retries, the dead and the rows left in doubt, and released
// rows get their attempt back. An empty route is stored as none, so a row
// never shows the route of an older attempt next to a newer error.
func (st *settlement) change() error {
	now, p := st.now, st.p
	if p.KeepDelivered {
		if err := st.lockAndRun(st.d.q.settleDeliveredKept, []any{now}, p.Delivered, true); err != nil {
			return err
		}
	} else if err := st.lockAndRun(st.d.q.settleDelivered, nil, p.Delivered, true); err != nil {
		return err
	}
	if err := st.failed(); err != nil {
		return err
	}
	// A release also clears an at-most-once mark: the relay releases only
	// rows it did not send.
	return st.lockAndRun(st.d.q.settleRelease, []any{now}, p.Release, false)
}

// failed records the retries, the dead and the rows left in doubt: one
// lock of them all, chunk of them a statement, then one statement an
// outcome on the rows it found, each row's own time, error and route in
// CASE lists (queries/settle_retry.sql, settle_dead.sql,
// settle_in_doubt.sql), so that a batch of failures costs a few
// statements, not two a row. A row named twice takes the first outcome
// it is named with, as a change one outcome at a time would leave it.
func (st *settlement) failed() error {
	now, p := st.now, st.p
	type failure struct {
		outcome int   // index in outcomes
		values  []any // one a CASE list of the outcome's statement
	}
	outcomes := []struct {
		q      string
		before []any // the arguments before the CASE lists
	}{
		{st.d.q.settleRetry, nil},
		{st.d.q.settleDead, []any{now}},
		// Left in doubt: the mark kept (set now when there was none), and
		// a probe may take the row after ProbeAfter.
		{st.d.q.settleInDoubt, []any{now}},
	}
	of := map[int64]failure{}
	var ids []int64
	add := func(id int64, outcome int, values ...any) {
		if _, ok := of[id]; !ok {
			of[id] = failure{outcome, values}
			ids = append(ids, id)
		}
	}
	for _, r := range p.Retry {
		back := 0
		if r.Uncounted {
			back = 1 // failed on its destination, not on its own
		}
		add(r.ID, 0, now+max(r.Delay, 0).Microseconds(), back, r.Error, r.Route)
	}
	for _, f := range p.Dead {
		add(f.ID, 1, f.Error, f.Route)
	}
	for _, f := range p.InDoubt {
		add(f.ID, 2, now+max(f.ProbeAfter, 0).Microseconds(), f.Error, f.Route)
	}
	return st.lockThen(ids, false, func(found []int64) error {
		for i, o := range outcomes {
			var rows []int64
			for _, id := range found {
				if of[id].outcome == i {
					rows = append(rows, id)
				}
			}
			if len(rows) == 0 {
				continue
			}
			args := append([]any(nil), o.before...)
			for c := range of[rows[0]].values {
				for _, id := range rows {
					args = append(args, id, of[id].values[c])
				}
			}
			if _, err := st.w.ExecContext(st.ctx, withList(o.q, len(rows)), sqlkit.Args(rows, args...)...); err != nil {
				return err
			}
		}
		return nil
	})
}

// lockAndRun locks the rows of ids still leased to the token under a live
// lease and runs q, a statement on {{ids}} whose other arguments are
// setArgs, on them (lockThen).
func (st *settlement) lockAndRun(q string, setArgs []any, ids []int64, delivered bool) error {
	return st.lockThen(ids, delivered, func(found []int64) error {
		_, err := st.w.ExecContext(st.ctx, withList(q, len(found)), sqlkit.Args(found, setArgs...)...)
		return err
	})
}

// lockThen locks the rows of ids still leased to the token under a live
// lease (queries/settle_lock.sql), chunk of them a statement, records them
// (as delivered when delivered) and runs change on those found in each
// chunk; MySQL has no UPDATE … RETURNING, so the lock tells which rows
// take the outcome.
func (st *settlement) lockThen(ids []int64, delivered bool, change func(found []int64) error) error {
	for part := range slices.Chunk(ids, chunk) {
		rows, err := st.w.QueryContext(st.ctx, withList(st.d.q.settleLock, len(part)), append(sqlkit.Args(part), st.p.Token, st.now)...)
		if err != nil {
			return err
		}
		found, err := st.s.Read(rows, delivered)
		if err != nil {
			return err
		}
		if len(found) > 0 {
			if err := change(found); err != nil {
				return err
			}
		}
	}
	return nil
}

var _ driver.DueReporter = (*Driver)(nil)

// NextDue reports how long until the earliest pending row of types that is
// not due yet comes due, on the database clock: a scheduled row or one
// waiting for a retry (queries/next_due.sql, which reads the clock too).
func (d *Driver) NextDue(ctx context.Context, types []string) (time.Duration, bool, error) {
	if len(types) == 0 {
		return 0, false, nil
	}
	var next sql.NullInt64
	var now int64
	if err := d.db.QueryRowContext(ctx, withList(d.q.nextDue, len(types)), sqlkit.Args(types)...).Scan(&next, &now); err != nil {
		return 0, false, wrap("next due", err)
	}
	if !next.Valid {
		return 0, false, nil
	}
	return time.Duration(next.Int64-now) * time.Microsecond, true, nil
}
