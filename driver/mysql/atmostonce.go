package mysql

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

// Mark locks the rows still leased to p.Token under a live lease and not
// marked (queries/mark_lock.sql), marks them (queries/mark.sql) and
// commits before returning them. The commit is as durable as the server
// makes it: innodb_flush_log_at_trx_commit=1 (the default) flushes it,
// which a session cannot raise on its own (docs/mysql.md).
func (d *Driver) Mark(ctx context.Context, p driver.MarkParams) ([]int64, error) {
	if len(p.IDs) == 0 {
		return nil, nil
	}
	var marked []int64
	err := d.write(ctx, func(w writer, _ int64) error {
		marked = nil
		for ids := p.IDs; len(ids) > 0; ids = ids[min(len(ids), chunk):] {
			part := ids[:min(len(ids), chunk)]
			rows, err := w.QueryContext(ctx, withList(d.q.markLock, len(part)), append(sqlkit.Args(part), p.Token)...)
			if err != nil {
				return wrap("mark", err)
			}
			var found []int64
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return wrap("mark", err)
				}
				found = append(found, id)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return wrap("mark", err)
			}
			if len(found) == 0 {
				continue
			}
			if _, err := w.ExecContext(ctx, withList(d.q.mark, len(found)), sqlkit.Args(found)...); err != nil {
				return wrap("mark", err)
			}
			marked = append(marked, found...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(marked)
	return marked, nil
}

// ClaimInDoubt leases rows in doubt for a reconcile probe, fenced as Claim
// is, without counting an attempt; the rows stay marked
// (queries/claim_in_doubt.sql, claim_in_doubt_lease.sql).
func (d *Driver) ClaimInDoubt(ctx context.Context, p driver.InDoubtClaimParams) ([]driver.Job, error) {
	types, err := sqlkit.ClaimTypes(p.Types, p.Limit, p.Lease)
	if len(types) == 0 || err != nil {
		return nil, wrap("claim in doubt", err)
	}
	var jobs []driver.Job
	err = d.write(ctx, func(w writer, now int64) error {
		jobs = nil
		if ok, err := d.fenced(ctx, w, p.Fence); !ok || err != nil {
			return err
		}
		rows, err := w.QueryContext(ctx, withList(d.q.claimInDoubt, len(types)), append(sqlkit.Args(types), now-max(p.Quiet, 0).Microseconds(), p.Limit)...)
		if err != nil {
			return wrap("claim in doubt", err)
		}
		var ids []int64
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return wrap("claim in doubt", err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return wrap("claim in doubt", err)
		}
		if _, err := w.ExecContext(ctx, withList(d.q.claimInDoubtLease, len(ids)), sqlkit.Args(ids, p.Token, now+p.Lease.Microseconds())...); err != nil {
			return wrap("claim in doubt", err)
		}
		jobs, err = d.jobsByID(ctx, w, ids, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	for i := range jobs {
		jobs[i].State = driver.StateInDoubt
	}
	return jobs, nil
}

// Resolve records an operator's decision on rows in doubt, in one
// transaction that locks them first (queries/doubt_rows.sql).
func (d *Driver) Resolve(ctx context.Context, p driver.ResolveParams) (driver.ResolveResult, error) {
	if err := driver.CheckResolve(p); err != nil {
		return driver.ResolveResult{}, err
	}
	var res driver.ResolveResult
	err := d.write(ctx, func(w writer, now int64) error {
		res = driver.ResolveResult{}
		found, err := d.rowsInDoubt(ctx, w, p.IDs)
		if err != nil {
			return err
		}
		delivered := map[string]int64{}
		for _, r := range found {
			if err := d.resolveRow(ctx, w, p, r); err != nil {
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

type doubtRow struct {
	id       int64
	mid, typ string
	key      string
}

func (d *Driver) rowsInDoubt(ctx context.Context, w writer, ids []int64) ([]doubtRow, error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	rows, err := w.QueryContext(ctx, withList(d.q.doubtRows, len(ids)), sqlkit.Args(ids)...)
	if err != nil {
		return nil, wrap("resolve", err)
	}
	defer rows.Close()
	var found []doubtRow
	for rows.Next() {
		var r doubtRow
		if err := rows.Scan(&r.id, &r.mid, &r.typ, &r.key); err != nil {
			return nil, wrap("resolve", err)
		}
		found = append(found, r)
	}
	return found, wrap("resolve", rows.Err())
}

func (d *Driver) resolveRow(ctx context.Context, w writer, p driver.ResolveParams, r doubtRow) error {
	var q string
	var args []any
	switch {
	case p.Outcome == driver.ResolveDelivered && !p.KeepDelivered:
		q, args = d.q.resolveDelivered, []any{r.id}
	case p.Outcome == driver.ResolveDelivered:
		q, args = d.q.resolveKept, []any{r.id}
	case p.Outcome == driver.ResolveRetry:
		q, args = d.q.resolveRetry, []any{"resolved by " + p.By + ": retry (" + p.Reason + ")", r.id}
	default:
		q, args = d.q.resolveDead, []any{"resolved by " + p.By + ": dead (" + p.Reason + ")", r.id}
	}
	if _, err := w.ExecContext(ctx, q, args...); err != nil {
		return wrap("resolve", err)
	}
	if _, err := w.ExecContext(ctx, d.q.resolveRecord, r.id, r.mid, r.typ, r.key, string(p.Outcome), p.By, p.Reason); err != nil {
		return wrap("resolve record", err)
	}
	return nil
}

// resolution sorts p.IDs (each once, in the order given) into resolved
// and not in doubt.
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

// Resolutions lists the recorded decisions, newest first
// (queries/resolutions.sql, or resolutions_of.sql for some messages).
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
		q, args = withList(d.q.resolutionsOf, len(ids)), append(sqlkit.Args(ids), limit)
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
			return nil, fmt.Errorf("mensageria/mysql: resolution of outbox row %d has message_id %q, not a UUID: %w", x.OutboxID, mid, err)
		}
		x.MessageID, x.Outcome, x.At = id, driver.Resolution(outcome), fromMicros(at)
		out = append(out, x)
	}
	return out, wrap("resolutions", rows.Err())
}
