package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
)

var _ driver.AtMostOnce = (*Driver)(nil)

// Mark records the at-most-once attempt of the rows of p. See
// queries/mark.sql. Unlike the relay's other statements it commits
// synchronously whatever the server's default: a mark lost in a crash
// would let the row be sent again after its effect was applied. A setting
// of the session's that is already durable (on, local, remote_write,
// remote_apply) is kept; only off is raised to on.
func (d *Driver) Mark(ctx context.Context, p driver.MarkParams) ([]int64, error) {
	if len(p.IDs) == 0 {
		return nil, nil
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("SELECT set_config('synchronous_commit', CASE current_setting('synchronous_commit') WHEN 'off' THEN 'on' ELSE current_setting('synchronous_commit') END, true)")
	b.Queue(d.q.mark, p.IDs, p.Token)
	b.Queue("COMMIT")
	br := d.pool.SendBatch(ctx, b)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("mensageria/postgres: mark: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: mark: %w", err)
	}
	marked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: mark: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("mensageria/postgres: mark commit: %w", err)
	}
	return marked, nil
}

// ClaimInDoubt leases rows in doubt for a reconcile probe. See
// queries/claim_in_doubt.sql.
func (d *Driver) ClaimInDoubt(ctx context.Context, p driver.InDoubtClaimParams) ([]driver.Job, error) {
	if len(p.Types) == 0 || p.Limit <= 0 {
		return nil, nil
	}
	app, epoch := "", int64(0)
	if p.Fence != nil {
		app, epoch = p.Fence.App, p.Fence.Epoch
	}
	b := relayTx(func(b *pgx.Batch) {
		b.Queue(d.q.claimInDoubt, p.Types, p.Limit, p.Token, p.Lease, app, epoch, max(p.Quiet, 0))
	})
	br := d.pool.SendBatch(ctx, b)
	defer br.Close()
	for range relayTxPrologue {
		if _, err := br.Exec(); err != nil {
			return nil, fmt.Errorf("mensageria/postgres: claim in doubt: %w", err)
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: claim in doubt: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (driver.Job, error) {
		// Read apart, as the claim's (unreadable.go): one row with an
		// infinite time never fails the probe of every other.
		var j driver.Job
		var t rowTimes
		err := r.Scan(&j.ID, &j.MessageID, &j.Type, &j.Key, &j.Payload, &j.Headers, &j.Attempt, &t.created, &t.available, &t.attempted)
		t.into(&j)
		j.State = driver.StateInDoubt
		return j, err
	})
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: claim in doubt: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("mensageria/postgres: claim in doubt commit: %w", err)
	}
	sortJobs(jobs)
	return jobs, nil
}

// Resolve records an operator's decision on rows in doubt. See
// queries/resolve.sql.
func (d *Driver) Resolve(ctx context.Context, p driver.ResolveParams) (driver.ResolveResult, error) {
	if err := driver.CheckResolve(p); err != nil {
		return driver.ResolveResult{}, err
	}
	rows, err := d.pool.Query(ctx, d.q.resolve, p.IDs, string(p.Outcome), p.By, p.Reason, p.KeepDelivered)
	if err != nil {
		return driver.ResolveResult{}, fmt.Errorf("mensageria/postgres: resolve: %w", err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return driver.ResolveResult{}, fmt.Errorf("mensageria/postgres: resolve: %w", err)
	}
	return sortResolved(p.IDs, done), nil
}

func sortResolved(ids, done []int64) driver.ResolveResult {
	var res driver.ResolveResult
	got := map[int64]bool{}
	for _, id := range done {
		got[id] = true
	}
	seen := map[int64]bool{}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		if got[id] {
			res.Resolved = append(res.Resolved, id)
		} else {
			res.NotInDoubt = append(res.NotInDoubt, id)
		}
	}
	return res
}

// Resolutions lists recorded decisions. See queries/resolutions.sql.
func (d *Driver) Resolutions(ctx context.Context, messageIDs [][16]byte, limit int) ([]driver.ResolutionRecord, error) {
	if limit <= 0 {
		limit = 100
	}
	ids := messageIDs
	if ids == nil {
		ids = [][16]byte{}
	}
	rows, err := d.pool.Query(ctx, d.q.resolutions, ids, limit)
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: resolutions: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (driver.ResolutionRecord, error) {
		var x driver.ResolutionRecord
		var outcome string
		err := r.Scan(&x.OutboxID, &x.MessageID, &x.Type, &x.Key, &outcome, &x.By, &x.Reason, &x.At)
		x.Outcome = driver.Resolution(outcome)
		return x, err
	})
}
