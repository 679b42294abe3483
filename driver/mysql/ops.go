package mysql

import (
	"context"
	"database/sql"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/xadm/mensageria/driver"
)

// Stats reports every type with pending or dead rows or deliveries in the
// last hour (queries/stats.sql; see drivertest for what each count holds).
// Owner is the type's app in the catalog ("" for none, or unclaimed;
// queries/stats_owners.sql).
func (d *Driver) Stats(ctx context.Context) ([]driver.TypeStats, error) {
	now, err := d.now(ctx)
	if err != nil {
		return nil, err
	}
	// now is each of the statement's first eight arguments (it is no
	// literal: a statement's text stays one for every call).
	args := append(slices.Repeat([]any{now}, 8), now-time.Hour.Microseconds())
	rows, err := d.db.QueryContext(ctx, d.q.stats, args...)
	if err != nil {
		return nil, wrap("stats", err)
	}
	defer rows.Close()
	byType := map[string]*driver.TypeStats{}
	for rows.Next() {
		var s driver.TypeStats
		var oldest, oldestDoubt sql.NullInt64
		if err := rows.Scan(&s.Type, &s.Pending, &s.InFlight, &s.Dead, &s.DeliveredLastHr, &oldest, &s.InDoubt, &oldestDoubt, &s.Scheduled); err != nil {
			return nil, wrap("stats", err)
		}
		s.OldestPending = ageOf(oldest, now)
		s.OldestInDoubt = ageOf(oldestDoubt, now)
		if prev, ok := byType[s.Type]; ok { // one row from each branch
			prev.Pending += s.Pending
			prev.InFlight += s.InFlight
			prev.Dead += s.Dead
			prev.DeliveredLastHr += s.DeliveredLastHr
			prev.OldestPending = max(prev.OldestPending, s.OldestPending)
			prev.InDoubt += s.InDoubt
			prev.OldestInDoubt = max(prev.OldestInDoubt, s.OldestInDoubt)
			prev.Scheduled += s.Scheduled
			continue
		}
		byType[s.Type] = &s
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("stats", err)
	}
	owners, err := d.db.QueryContext(ctx, d.q.statsOwners)
	if err != nil {
		return nil, wrap("stats owners", err)
	}
	defer owners.Close()
	for owners.Next() {
		var typ, app string
		if err := owners.Scan(&typ, &app); err != nil {
			return nil, wrap("stats owners", err)
		}
		if s, ok := byType[typ]; ok {
			s.Owner = app
		}
	}
	if err := owners.Err(); err != nil {
		return nil, wrap("stats owners", err)
	}
	out := make([]driver.TypeStats, 0, len(byType))
	for _, s := range byType {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b driver.TypeStats) int { return strings.Compare(a.Type, b.Type) })
	return out, nil
}

// ageOf is the age at now of a time in unix microseconds: none for a NULL
// or a time in the future, at most the longest Duration.
func ageOf(us sql.NullInt64, now int64) time.Duration {
	if !us.Valid || us.Int64 >= now {
		return 0
	}
	if now-us.Int64 <= 0 || now-us.Int64 > math.MaxInt64/int64(time.Microsecond) {
		return math.MaxInt64
	}
	return time.Duration(now-us.Int64) * time.Microsecond
}

// Default and largest page of ListMessages.
const (
	defaultListLimit = 100
	maxListLimit     = 10000
)

// ListMessages pages through outbox rows in id order.
//
// Its WHERE is built here, not read from queries/, as the PostgreSQL and
// SQLite drivers' are: each filter is there only when given, so that the
// server plans the listing on the index of what is given (the primary key
// for ids, a state's range of an index) instead of one plan for every
// combination.
func (d *Driver) ListMessages(ctx context.Context, f driver.ListFilter) ([]driver.Job, error) {
	now, err := d.now(ctx)
	if err != nil {
		return nil, err
	}
	var where []string
	args := []any{now} // jobCols' test of a row in doubt
	switch f.State {
	case "":
	case driver.StateInDoubt:
		where = append(where, doubtCond)
		args = append(args, now)
	case driver.StatePending:
		where = append(where, "state = 'pending' AND NOT "+doubtCond)
		args = append(args, now)
	default:
		where = append(where, "state = ?")
		args = append(args, string(f.State))
	}
	if len(f.Types) > 0 {
		where = append(where, "type IN ("+marks(len(f.Types))+")")
		for _, t := range f.Types {
			args = append(args, t)
		}
	}
	if len(f.IDs) > 0 {
		where = append(where, "id IN ("+marks(len(f.IDs))+")")
		for _, id := range f.IDs {
			args = append(args, id)
		}
	}
	if f.AfterID > 0 {
		where = append(where, "id > ?")
		args = append(args, f.AfterID)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	limit = min(limit, maxListLimit)
	// The owner is one primary-key lookup in the catalog per row listed.
	q := "SELECT " + jobCols + ", (SELECT w.app FROM " + d.prefix + "owners w WHERE w.kind = 'type' AND w.name = " + d.prefix + "outbox" + ".type) FROM " + d.prefix + "outbox"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id LIMIT ?"
	args = append(args, limit)
	rows, err := d.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, wrap("list messages", err)
	}
	return scanJobs(rows, true)
}

// Revive moves dead rows back to pending with a fresh attempt count, or
// deletes them. It selects by IDs, or by Types when IDs is empty (both
// narrow the set when both are given); with neither it changes nothing.
// Its WHERE is built here, as ListMessages' is: only the selections given.
func (d *Driver) Revive(ctx context.Context, p driver.ReviveParams) (int, error) {
	if len(p.IDs) == 0 && len(p.Types) == 0 {
		return 0, nil
	}
	where := "state = 'dead'"
	var args []any
	if len(p.IDs) > 0 {
		where += " AND id IN (" + marks(len(p.IDs)) + ")"
		for _, id := range p.IDs {
			args = append(args, id)
		}
	}
	if len(p.Types) > 0 {
		where += " AND type IN (" + marks(len(p.Types)) + ")"
		for _, t := range p.Types {
			args = append(args, t)
		}
	}
	// A row an at-most-once attempt marked stays dead unless its mark is
	// cleared with it: pending and marked it would read as in doubt and
	// never be sent (ADR 0015).
	retryWhere := where
	if !p.ClearMark {
		retryWhere += " AND attempted_at IS NULL"
	}
	o := d.prefix + "outbox"
	var n int64
	err := d.write(ctx, func(w writer, now int64) error {
		var res sql.Result
		var err error
		if p.Discard {
			res, err = w.ExecContext(ctx, "DELETE FROM "+o+" WHERE "+where, args...)
		} else {
			// The count restarts so the relay's attempt limit applies
			// afresh; last_error stays as the reason it had died.
			res, err = w.ExecContext(ctx, "UPDATE "+o+" SET state = 'pending', attempts = 0, available_at = ?, lease_token = NULL, lease_until = NULL, attempted_at = NULL WHERE "+retryWhere,
				append([]any{now}, args...)...)
		}
		if err != nil {
			return wrap("revive", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return int(n), err
}
