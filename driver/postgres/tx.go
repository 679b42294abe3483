package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria/driver"
)

// durableBegin opens a transaction that commits synchronously whatever
// the session's default: a setting already durable (on, local,
// remote_write, remote_apply) is kept, only off is raised to on. One
// simple-protocol round trip, as a plain BEGIN is.
const durableBegin = "BEGIN; SELECT pg_catalog.set_config('synchronous_commit', CASE pg_catalog.current_setting('synchronous_commit') WHEN 'off' THEN 'on' ELSE pg_catalog.current_setting('synchronous_commit') END, true)"

// InTx runs fn in a transaction; fn's tx.Raw() is a pgx.Tx.
//
// The commit is synchronous even on a session whose synchronous_commit
// is off: a receiver acknowledges what InTx committed (an HTTP 200, a
// JetStream ack), and the sender then settles its row for good. An
// asynchronous commit is answered before it is flushed, so a server crash
// in between would lose the effect and its dedup record after the sender
// was told they were done; the settle, made after the restart, survives.
func (d *Driver) InTx(ctx context.Context, fn func(ctx context.Context, tx driver.Tx) error) error {
	return pgx.BeginTxFunc(ctx, d.pool, pgx.TxOptions{BeginQuery: durableBegin}, func(tx pgx.Tx) error {
		return fn(ctx, &pgTx{d: d, tx: tx})
	})
}

type pgTx struct {
	d  *Driver
	tx pgx.Tx
}

func (t *pgTx) Raw() any { return t.tx }

func (t *pgTx) InboxRecord(ctx context.Context, r driver.InboxRecord) (driver.InboxResult, error) {
	var created *time.Time
	if !r.CreatedAt.IsZero() && r.Window > 0 {
		created = &r.CreatedAt
	}
	tag, err := t.tx.Exec(ctx, t.d.q.inboxRecord, r.Consumer, r.Key, r.MessageID, created, r.Window, r.PayloadHash)
	if err != nil {
		return driver.InboxResult{}, fmt.Errorf("mensageria/postgres: inbox: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return driver.InboxResult{}, nil
	}
	// Not inserted: either a record exists (duplicate) or the message was
	// too old to be checked (stale). A record wins: it proves the effect.
	res := driver.InboxResult{Duplicate: true}
	err = t.tx.QueryRow(ctx, t.d.q.inboxFirst, r.Consumer, r.Key).Scan(&res.FirstMessageID, &res.FirstPayloadHash)
	if errors.Is(err, pgx.ErrNoRows) {
		return driver.InboxResult{Stale: true}, nil
	}
	if err != nil {
		return driver.InboxResult{}, fmt.Errorf("mensageria/postgres: inbox: %w", err)
	}
	return res, nil
}

// Offset locks the position it returns until the transaction ends: a sink
// member dropped from its group while this transaction is open must not
// apply the same records as the new owner. A position not stored yet has
// no row to lock, so the transaction takes an advisory lock on its key
// instead and looks again: the second of two first appliers then waits for
// the first and reads what it stored.
func (t *pgTx) Offset(ctx context.Context, consumer, source string, partition int32) (int64, bool, error) {
	pos, ok, err := t.lockedOffset(ctx, consumer, source, partition)
	if err != nil || ok {
		return pos, ok, err
	}
	key := t.d.lockKey("offset\x00" + consumer + "\x00" + source + "\x00" + strconv.Itoa(int(partition)))
	if _, err := t.tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", key); err != nil {
		return 0, false, fmt.Errorf("mensageria/postgres: offset lock: %w", err)
	}
	return t.lockedOffset(ctx, consumer, source, partition)
}

func (t *pgTx) lockedOffset(ctx context.Context, consumer, source string, partition int32) (int64, bool, error) {
	var pos int64
	err := t.tx.QueryRow(ctx, "SELECT position FROM "+t.d.table("offsets")+" WHERE consumer = $1 AND source = $2 AND partition = $3 FOR UPDATE",
		consumer, source, partition).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("mensageria/postgres: offset: %w", err)
	}
	return pos, true, nil
}

func (t *pgTx) SetOffset(ctx context.Context, consumer, source string, partition int32, offset int64) error {
	_, err := t.tx.Exec(ctx, `INSERT INTO `+t.d.table("offsets")+` (consumer, source, partition, position) VALUES ($1, $2, $3, $4)
		ON CONFLICT (consumer, source, partition) DO UPDATE SET position = excluded.position, updated_at = now()`,
		consumer, source, partition, offset)
	if err != nil {
		return fmt.Errorf("mensageria/postgres: set offset: %w", err)
	}
	return nil
}
