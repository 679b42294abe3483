package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
)

// ListMessages pages through rows in id order.
func (d *Driver) ListMessages(ctx context.Context, f driver.ListFilter) ([]driver.Job, error) {
	var where []string
	var args []any
	arg := func(v any) string { args = append(args, v); return fmt.Sprintf("$%d", len(args)) }
	// A row in doubt is stored pending; it is listed, and filtered, as
	// in doubt (driver.StateInDoubt).
	doubt := "(state = 'pending' AND attempted_at IS NOT NULL AND (lease_until IS NULL OR lease_until <= now()))"
	switch f.State {
	case "":
	case driver.StateInDoubt:
		where = append(where, doubt)
	case driver.StatePending:
		where = append(where, "state = 'pending' AND NOT "+doubt)
	default:
		where = append(where, "state = "+arg(string(f.State)))
	}
	if len(f.Types) > 0 {
		where = append(where, "type = ANY("+arg(f.Types)+"::text[])")
	}
	if len(f.IDs) > 0 {
		where = append(where, "id = ANY("+arg(f.IDs)+"::bigint[])")
	}
	if f.AfterID > 0 {
		where = append(where, "id > "+arg(f.AfterID))
	}
	// The owner is one primary-key lookup in the catalog per row listed.
	q := "SELECT id, message_id, type, key, payload, headers, CASE WHEN " + doubt + " THEN 'in_doubt' ELSE state END, attempts, attempted_at, created_at, available_at, delivered_at, coalesce(last_error, ''), coalesce(last_route, ''), " +
		"coalesce((SELECT w.app FROM " + d.table("owners") + " w WHERE w.kind = 'type' AND w.name = o.type), '') FROM " + d.table("outbox") + " o"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id LIMIT " + arg(f.EffectiveLimit())
	rows, err := d.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: list: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (driver.Job, error) {
		var j driver.Job
		var state string
		var t rowTimes
		err := r.Scan(&j.ID, &j.MessageID, &j.Type, &j.Key, &j.Payload, &j.Headers, &state, &j.Attempt, &t.attempted, &t.created, &t.available, &t.delivered, &j.LastError, &j.LastRoute, &j.Owner)
		t.into(&j)
		j.State = driver.State(state)
		return j, err
	})
}

// Revive retries (back to pending, attempts reset, due now) or discards
// dead rows, selected by ids or else by types.
func (d *Driver) Revive(ctx context.Context, p driver.ReviveParams) (int, error) {
	var cond string
	var sel any
	switch {
	case len(p.IDs) > 0:
		cond, sel = "id = ANY($1::bigint[])", p.IDs
	case len(p.Types) > 0:
		cond, sel = "type = ANY($1::text[])", p.Types
	default:
		return 0, nil // selecting nothing changes nothing
	}
	// A row an at-most-once attempt marked stays dead unless the mark is
	// cleared with it: pending and marked it would read as in doubt and
	// never be sent (ADR 0015).
	q := "UPDATE " + d.table("outbox") + " SET state = 'pending', attempts = 0, available_at = now(), lease_token = NULL, lease_until = NULL, attempted_at = NULL WHERE state = 'dead' AND " + cond
	if !p.ClearMark {
		q += " AND attempted_at IS NULL"
	}
	if p.Discard {
		q = "DELETE FROM " + d.table("outbox") + " WHERE state = 'dead' AND " + cond
	}
	tag, err := d.pool.Exec(ctx, q, sel)
	if err != nil {
		return 0, fmt.Errorf("mensageria/postgres: revive: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
