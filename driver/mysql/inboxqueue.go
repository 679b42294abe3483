package mysql

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

var (
	_ driver.InboxQueueTx     = (*tx)(nil)
	_ driver.InboxQueueReader = (*Driver)(nil)
)

// QueueInbox stores d as a pending row of its consumer's queue
// (queries/inbox_queue_insert.sql).
func (t *tx) QueueInbox(ctx context.Context, d driver.QueuedDelivery) (int64, error) {
	headers := d.Headers
	if len(headers) == 0 {
		headers = []byte("{}")
	}
	var created any
	if !d.CreatedAt.IsZero() {
		created = d.CreatedAt.UnixMicro()
	}
	r, err := t.tx.ExecContext(ctx, t.d.q.queueInsert, d.Consumer, d.Type, d.Key, uuid.UUID(d.MessageID).String(), string(d.Payload), string(headers), created)
	if err != nil {
		return 0, wrap("inbox queue", err)
	}
	id, err := r.LastInsertId()
	return id, wrap("inbox queue", err)
}

// ClaimInbox runs queries/inbox_claim.sql: the rows are locked to this
// transaction, and another transaction's claim skips them.
func (t *tx) ClaimInbox(ctx context.Context, consumer string, limit int) ([]driver.InboxRow, error) {
	if limit < 1 {
		return nil, &ConfigError{Field: "limit", Reason: "an inbox claim takes at least 1 row"}
	}
	rows, err := t.tx.QueryContext(ctx, t.d.q.queueClaim, consumer, limit)
	if err != nil {
		return nil, wrap("inbox claim", err)
	}
	defer rows.Close()
	var out []driver.InboxRow
	for rows.Next() {
		var q driver.InboxRow
		var mid string
		var payload, headers []byte
		var created, received, available int64
		if err := rows.Scan(&q.ID, &q.Consumer, &q.Type, &q.Key, &mid, &payload, &headers, &created, &received, &q.State, &q.Attempts, &available, &q.LastError); err != nil {
			return nil, wrap("inbox claim", err)
		}
		if id, err := uuid.Parse(mid); err == nil {
			q.MessageID = id
		}
		q.Payload, q.Headers = payload, headers
		q.CreatedAt, q.ReceivedAt, q.AvailableAt = time.UnixMicro(created), time.UnixMicro(received), time.UnixMicro(available)
		out = append(out, q)
	}
	return out, wrap("inbox claim", rows.Err())
}

func (t *tx) InboxApplied(ctx context.Context, id int64) error {
	r, err := t.tx.ExecContext(ctx, t.d.q.queueApplied, id)
	return t.changedOne(ctx, id, r, err)
}

func (t *tx) InboxFailed(ctx context.Context, id int64, reason string, retryAfter time.Duration) (int, error) {
	if retryAfter < 0 {
		return 0, &ConfigError{Field: "retryAfter", Reason: "must not be negative"}
	}
	r, err := t.tx.ExecContext(ctx, t.d.q.queueFailed, reason, retryAfter.Seconds(), id)
	if err := t.changedOne(ctx, id, r, err); err != nil {
		return 0, err
	}
	var n int
	err = t.tx.QueryRowContext(ctx, t.d.q.queueAttempts, id).Scan(&n)
	return n, wrap("inbox queue", err)
}

func (t *tx) InboxDead(ctx context.Context, id int64, reason string) error {
	r, err := t.tx.ExecContext(ctx, t.d.q.queueDead, reason, id)
	return t.changedOne(ctx, id, r, err)
}

// changedOne turns an UPDATE of one pending row that changed none into
// the *driver.InboxRowError naming the row's state.
func (t *tx) changedOne(ctx context.Context, id int64, r sql.Result, err error) error {
	if err != nil {
		return wrap("inbox queue", err)
	}
	if n, err := r.RowsAffected(); err != nil || n == 1 {
		return wrap("inbox queue", err)
	}
	var st string
	err = t.tx.QueryRowContext(ctx, t.d.q.queueRowState, id).Scan(&st)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return wrap("inbox queue", err)
	}
	return &driver.InboxRowError{ID: id, State: st}
}

// InboxQueueStats reports the queue per consumer.
func (d *Driver) InboxQueueStats(ctx context.Context) ([]driver.InboxQueueStats, error) {
	rows, err := d.db.QueryContext(ctx, d.q.queueStats)
	if err != nil {
		return nil, wrap("inbox queue stats", err)
	}
	defer rows.Close()
	var out []driver.InboxQueueStats
	for rows.Next() {
		var s driver.InboxQueueStats
		var oldest int64
		if err := rows.Scan(&s.Consumer, &s.Pending, &s.Dead, &oldest); err != nil {
			return nil, wrap("inbox queue stats", err)
		}
		s.OldestPending = time.Duration(oldest) * time.Microsecond
		out = append(out, s)
	}
	return out, wrap("inbox queue stats", rows.Err())
}
