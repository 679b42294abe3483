package mysql

import (
	"context"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlkit"
)

// Stats reports every type with pending or dead rows or deliveries in the
// last hour (queries/stats.sql; see drivertest for what each count holds).
// Owner is the type's app in the catalog ("" for none, or unclaimed;
// queries/stats_owners.sql).
func (d *Driver) Stats(ctx context.Context) ([]driver.TypeStats, error) {
	return sqlkit.CollectStats(ctx, d.db, d.q.stats, nil, d.q.statsOwners, wrap)
}

// ListMessages pages through outbox rows in id order.
//
// Its WHERE is built here, not read from queries/, as the PostgreSQL and
// SQLite drivers' are: each filter is there only when given, so that the
// server plans the listing on the index of what is given (the primary key
// for ids, a state's range of an index) instead of one plan for every
// combination.
func (d *Driver) ListMessages(ctx context.Context, f driver.ListFilter) ([]driver.Job, error) {
	// The owner is one primary-key lookup in the catalog per row listed.
	// The tests of a row in doubt read the clock in the statement (one
	// time for all of it) instead of a round trip of their own.
	q, args := sqlkit.List{
		Select: "SELECT " + jobColsAt(nowExpr) + ", (SELECT w.app FROM " + d.prefix + "owners w WHERE w.kind = 'type' AND w.name = " + d.prefix + "outbox" + ".type) FROM " + d.prefix + "outbox",
		Doubt:  sqlkit.DoubtAt(nowExpr),
		Types:  sqlkit.InMarks[string],
		IDs:    sqlkit.InMarks[int64],
	}.Query(f)
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
	var n int
	err := d.write(ctx, func(w writer, now int64) error {
		var err error
		n, err = sqlkit.Revive(ctx, w, d.prefix, p, sqlkit.InMarks[int64], sqlkit.InMarks[string], now, wrap)
		return err
	})
	return n, err
}
