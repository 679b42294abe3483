package sqlite

import (
	"context"
	"encoding/json"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlkit"
)

// Stats reports every type with pending or dead rows or deliveries in the
// last hour. Pending counts rows waiting for a claim (due, or waiting for a
// retry); Scheduled counts rows not due yet that were never attempted
// (schedCond); InFlight counts rows under a live lease; DeliveredLastHr
// comes from the per-minute counts, so it includes rows deleted at settle.
// Owner is the type's app in the catalog ("" for none, or unclaimed).
func (d *Driver) Stats(ctx context.Context) ([]driver.TypeStats, error) {
	now, err := d.now(ctx)
	if err != nil {
		return nil, err
	}
	return sqlkit.CollectStats(ctx, d.db, d.q.stats, []any{now, now - time.Hour.Microseconds()}, d.q.statsOwners, wrap)
}

// ListMessages pages through outbox rows in id order.
//
// Its WHERE is built here, not read from queries/, as the PostgreSQL
// driver's is: each filter is there only when given, so that SQLite plans
// the listing on the index of what is given (the rowid for ids, a state's
// partial index) instead of one plan for every combination.
func (d *Driver) ListMessages(ctx context.Context, f driver.ListFilter) ([]driver.Job, error) {
	// now is read first, not in the statement (as NextDue's is): SQLite
	// keeps julianday('now') one time only within one step of a
	// statement, and a listing returns its rows in many.
	now, err := d.now(ctx)
	if err != nil {
		return nil, err
	}
	// The owner is one primary-key lookup in the catalog per row listed.
	q, args := sqlkit.List{
		Select: "SELECT " + jobCols + ", (SELECT w.app FROM " + d.prefix + "owners w WHERE w.kind = 'type' AND w.name = " + d.prefix + "outbox.type) FROM " + d.prefix + "outbox",
		Args:   []any{now}, // ?1, read by jobCols and doubtCond
		Doubt:  doubtCond,
		Types:  sqlkit.InMarks[string],
		IDs:    inJSON[int64],
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
		n, err = sqlkit.Revive(ctx, w, d.prefix, p, inJSON[int64], inJSON[string], now, wrap)
		return err
	})
	return n, err
}

// inJSON is col IN one JSON array, read with json_each: one host
// parameter whatever the length.
func inJSON[T any](col string, values []T) (string, []any) {
	b, _ := json.Marshal(values) // integers and strings always marshal
	return col + " IN (SELECT value FROM json_each(?))", []any{string(b)}
}
