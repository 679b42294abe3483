package sqlite

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlkit"
)

var _ driver.AtMostOnce = (*Driver)(nil)

// Mark records the at-most-once attempt of the rows of p: each still
// leased to p.Token under a live lease and not marked yet gets
// attempted_at. The transaction commits with synchronous=FULL, so the WAL
// is on disk before Mark returns (the driver's NORMAL survives a crash of
// the process but not of the machine); only the rows returned may be sent.
func (d *Driver) Mark(ctx context.Context, p driver.MarkParams) ([]int64, error) {
	if len(p.IDs) == 0 {
		return nil, nil
	}
	var marked []int64
	err := d.writeDurable(ctx, func(w writer, now int64) error {
		marked = marked[:0]
		rows, err := w.QueryContext(ctx, d.q.mark, now, int64sJSON(p.IDs), p.Token)
		if err != nil {
			return wrap("mark", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return wrap("mark", err)
			}
			marked = append(marked, id)
		}
		return wrap("mark", rows.Err())
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(marked)
	return marked, nil
}

// writeDurable is write with synchronous=FULL on its connection for the
// transaction (EXTRA is kept), put back as it was afterwards.
func (d *Driver) writeDurable(ctx context.Context, fn func(w writer, now int64) error) error {
	select {
	case d.gate <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("mensageria/sqlite: waiting for the write lock: %w", ctx.Err())
	}
	defer func() { <-d.gate }()
	c, err := d.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("mensageria/sqlite: %w", err)
	}
	defer c.Close()
	var was int
	if err := c.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&was); err != nil {
		return wrap("reading synchronous", err)
	}
	if was >= 2 { // FULL or EXTRA already
		return d.writeOn(ctx, c, fn)
	}
	if _, err := c.ExecContext(ctx, "PRAGMA synchronous = FULL"); err != nil {
		return wrap("synchronous = FULL", err)
	}
	defer func() {
		if _, err := c.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA synchronous = %d", was)); err != nil {
			_ = c.Raw(func(any) error { return errBadConn })
		}
	}()
	return d.writeOn(ctx, c, fn)
}

// ClaimInDoubt leases rows in doubt of p.Types whose probe time has come
// and whose lease ended at least p.Quiet ago,
// without counting an attempt, for a reconcile probe. The fence is the
// claim's.
func (d *Driver) ClaimInDoubt(ctx context.Context, p driver.InDoubtClaimParams) ([]driver.Job, error) {
	types, err := sqlkit.ClaimTypes(p.Types, p.Limit, p.Lease)
	if len(types) == 0 || err != nil {
		return nil, wrap("claim in doubt", err)
	}
	var jobs []driver.Job
	err = d.write(ctx, func(w writer, now int64) error {
		if ok, err := d.fenced(ctx, w, p.Fence); !ok || err != nil {
			return wrap("claim in doubt fence", err) // deposed: claim nothing
		}
		// The leased row reads as pending while the probe runs; RETURNING
		// sees the row after the update.
		rows, err := w.QueryContext(ctx, d.q.claimInDoubt,
			now, p.Token, now+p.Lease.Microseconds(), stringsJSON(types), p.Limit, now-max(p.Quiet, 0).Microseconds())
		if err != nil {
			return wrap("claim in doubt", err)
		}
		jobs, err = scanJobs(rows, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := range jobs {
		jobs[i].State = driver.StateInDoubt
	}
	slices.SortFunc(jobs, func(a, b driver.Job) int { return int(a.ID - b.ID) })
	return jobs, nil
}

// Resolve records an operator's decision on rows in doubt, in one
// transaction with the record of it.
func (d *Driver) Resolve(ctx context.Context, p driver.ResolveParams) (driver.ResolveResult, error) {
	if err := driver.CheckResolve(p); err != nil {
		return driver.ResolveResult{}, err
	}
	var res driver.ResolveResult
	err := d.write(ctx, func(w writer, now int64) error {
		res = driver.ResolveResult{}
		found, err := d.rowsInDoubt(ctx, w, now, p.IDs)
		if err != nil {
			return err
		}
		delivered := map[string]int64{}
		for _, r := range found {
			if err := d.resolveRow(ctx, w, now, p, r); err != nil {
				return err
			}
			if p.Outcome == driver.ResolveDelivered {
				delivered[r.typ]++
			}
		}
		if err := sqlkit.CountDelivered(ctx, w, d.q.deliveredCount, delivered, now); err != nil {
			return wrap("resolve counts", err)
		}
		res = resolution(p.IDs, found)
		return nil
	})
	return res, err
}

// doubtRow is a row in doubt an operator resolves.
type doubtRow struct {
	id       int64
	mid, typ string
	key      string
}

// rowsInDoubt reads which of ids are in doubt at now.
func (d *Driver) rowsInDoubt(ctx context.Context, w writer, now int64, ids []int64) ([]doubtRow, error) {
	rows, err := w.QueryContext(ctx, d.q.doubtRows, now, int64sJSON(ids))
	if err != nil {
		return nil, wrap("resolve", err)
	}
	var found []doubtRow
	for rows.Next() {
		var r doubtRow
		if err := rows.Scan(&r.id, &r.mid, &r.typ, &r.key); err != nil {
			rows.Close()
			return nil, wrap("resolve", err)
		}
		found = append(found, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, wrap("resolve", err)
	}
	return found, nil
}

// resolveRow applies the operator's decision p to row r and records it.
func (d *Driver) resolveRow(ctx context.Context, w writer, now int64, p driver.ResolveParams, r doubtRow) error {
	var q string
	args := []any{r.id}
	switch {
	case p.Outcome == driver.ResolveDelivered && !p.KeepDelivered:
		q = d.q.resolveDelivered
	case p.Outcome == driver.ResolveDelivered:
		q = d.q.resolveKept
		args = append(args, now)
	case p.Outcome == driver.ResolveRetry:
		q = d.q.resolveRetry
		args = append(args, now, "resolved by "+p.By+": retry ("+p.Reason+")")
	default:
		q = d.q.resolveDead
		args = append(args, "resolved by "+p.By+": dead ("+p.Reason+")")
	}
	if _, err := w.ExecContext(ctx, q, args...); err != nil {
		return wrap("resolve", err)
	}
	if _, err := w.ExecContext(ctx, d.q.resolveRecord,
		r.id, r.mid, r.typ, r.key, string(p.Outcome), p.By, p.Reason, now); err != nil {
		return wrap("resolve record", err)
	}
	return nil
}

// resolution sorts ids, each once, into those found in doubt (resolved)
// and the others.
func resolution(ids []int64, found []doubtRow) driver.ResolveResult {
	var res driver.ResolveResult
	done := map[int64]bool{}
	for _, r := range found {
		done[r.id] = true
	}
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if done[id] {
			res.Resolved = append(res.Resolved, id)
		} else {
			res.NotInDoubt = append(res.NotInDoubt, id)
		}
	}
	return res
}

// Resolutions lists recorded decisions, newest first.
func (d *Driver) Resolutions(ctx context.Context, messageIDs [][16]byte, limit int) ([]driver.ResolutionRecord, error) {
	if limit <= 0 {
		limit = 100
	}
	q, args := d.q.resolutions, []any{limit}
	if len(messageIDs) > 0 {
		ids := make([]string, len(messageIDs))
		for i, m := range messageIDs {
			ids[i] = uuid.UUID(m).String()
		}
		q, args = d.q.resolutionsOf, append(args, stringsJSON(ids))
	}
	rows, err := d.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, wrap("resolutions", err)
	}
	defer rows.Close()
	var out []driver.ResolutionRecord
	for rows.Next() {
		var x driver.ResolutionRecord
		var mid, outcome string
		var at int64
		if err := rows.Scan(&x.OutboxID, &mid, &x.Type, &x.Key, &outcome, &x.By, &x.Reason, &at); err != nil {
			return nil, wrap("resolutions", err)
		}
		id, err := uuid.Parse(strings.TrimSpace(mid))
		if err != nil {
			return nil, fmt.Errorf("mensageria/sqlite: resolution of outbox row %d has message_id %q, not a UUID: %w", x.OutboxID, mid, err)
		}
		x.MessageID, x.Outcome, x.At = id, driver.Resolution(outcome), fromMicros(at)
		out = append(out, x)
	}
	return out, wrap("resolutions", rows.Err())
}
