package postgres

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/xadm/mensageria/driver"
)

// The inbox queue (migrations/003_inbox_queue.sql): the receiver's store
// and, for Go callers, the app's side of the SQL protocol, each run through
// the functions an app in any language calls.

var (
	_ driver.InboxQueueTx     = (*pgTx)(nil)
	_ driver.InboxQueueReader = (*Driver)(nil)
)

// stateNotPending is the SQLSTATE of the queue's refusals.
const stateNotPending = "MS010"

func (t *pgTx) QueueInbox(ctx context.Context, d driver.QueuedDelivery) (int64, error) {
	headers := d.Headers
	if len(headers) == 0 {
		headers = []byte("{}")
	}
	var created *time.Time
	if !d.CreatedAt.IsZero() {
		created = &d.CreatedAt
	}
	var id int64
	err := t.tx.QueryRow(ctx, t.d.q.inboxQueueInsert, d.Consumer, d.Type, d.Key, d.MessageID, string(d.Payload), string(headers), created).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("mensageria/postgres: inbox queue: %w", err)
	}
	return id, nil
}

func (t *pgTx) ClaimInbox(ctx context.Context, consumer string, limit int) ([]driver.InboxRow, error) {
	rows, err := t.tx.Query(ctx, t.d.q.inboxClaim, consumer, limit)
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: inbox claim: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (driver.InboxRow, error) {
		var q driver.InboxRow
		var payload, headers string
		err := r.Scan(&q.ID, &q.Consumer, &q.Type, &q.Key, &q.MessageID, &payload, &headers, &q.CreatedAt, &q.ReceivedAt, &q.State, &q.Attempts, &q.AvailableAt, &q.LastError)
		q.Payload, q.Headers = []byte(payload), []byte(headers)
		return q, err
	})
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: inbox claim: %w", err)
	}
	return out, nil
}

func (t *pgTx) InboxApplied(ctx context.Context, id int64) error {
	_, err := t.tx.Exec(ctx, t.d.q.inboxApplied, id)
	return inboxRowError(id, err)
}

func (t *pgTx) InboxFailed(ctx context.Context, id int64, reason string, retryAfter time.Duration) (int, error) {
	var n int
	err := t.tx.QueryRow(ctx, t.d.q.inboxFailed, id, reason, retryAfter.Microseconds()).Scan(&n)
	return n, inboxRowError(id, err)
}

func (t *pgTx) InboxDead(ctx context.Context, id int64, reason string) error {
	_, err := t.tx.Exec(ctx, t.d.q.inboxDead, id, reason)
	return inboxRowError(id, err)
}

var notPendingState = regexp.MustCompile(`row \d+ is (\w+)`)

// inboxRowError turns the queue's MS010 refusal into an
// *driver.InboxRowError, the row's state read back from the message.
func inboxRowError(id int64, err error) error {
	if err == nil {
		return nil
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == stateNotPending {
		st := ""
		if m := notPendingState.FindStringSubmatch(pe.Message); m != nil {
			st = m[1]
		}
		return &driver.InboxRowError{ID: id, State: st}
	}
	return fmt.Errorf("mensageria/postgres: inbox queue row %s: %w", strconv.FormatInt(id, 10), err)
}

// InboxQueueStats reports the queue per consumer. See driver.InboxQueueReader.
func (d *Driver) InboxQueueStats(ctx context.Context) ([]driver.InboxQueueStats, error) {
	rows, err := d.pool.Query(ctx, d.q.inboxQueueStats)
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: inbox queue stats: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (driver.InboxQueueStats, error) {
		var s driver.InboxQueueStats
		var secs float64
		err := r.Scan(&s.Consumer, &s.Pending, &s.Dead, &secs)
		s.OldestPending = time.Duration(secs * float64(time.Second))
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("mensageria/postgres: inbox queue stats: %w", err)
	}
	return out, nil
}

// InboxChannel is the channel the receiver notifies after it stores rows,
// with the consumer's name as the payload: "<schema>_inbox".
func (d *Driver) InboxChannel() string { return d.schema + "_inbox" }

// NotifyInbox sends one notification on InboxChannel naming consumer, in a
// transaction of its own: after the rows it announces committed.
func (d *Driver) NotifyInbox(ctx context.Context, consumer string) error {
	if _, err := d.pool.Exec(ctx, "SELECT pg_notify($1, $2)", d.InboxChannel(), consumer); err != nil {
		return fmt.Errorf("mensageria/postgres: notify %s: %w", d.InboxChannel(), err)
	}
	return nil
}
