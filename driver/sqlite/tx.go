package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

// InTx runs fn in one *sql.Tx (Raw returns it). Open's database starts it
// with BEGIN IMMEDIATE, so a concurrent twin waits at BEGIN for the first
// to finish and then sees its inbox record.
func (d *Driver) InTx(ctx context.Context, fn func(ctx context.Context, tx driver.Tx) error) (err error) {
	stx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return wrap("begin", err)
	}
	defer func() {
		if p := recover(); p != nil {
			_ = stx.Rollback()
			panic(p)
		}
	}()
	if err := fn(ctx, &tx{d: d, tx: stx}); err != nil {
		_ = stx.Rollback()
		return err
	}
	return wrap("commit", stx.Commit())
}

type tx struct {
	d  *Driver
	tx *sql.Tx
}

func (t *tx) Raw() any { return t.tx }

func (t *tx) InboxRecord(ctx context.Context, r driver.InboxRecord) (driver.InboxResult, error) {
	if r.Consumer == "" || r.Key == "" {
		return driver.InboxResult{}, fmt.Errorf("mensageria/sqlite: inbox record needs a consumer and a key")
	}
	if r.Window > 0 && !r.CreatedAt.IsZero() {
		var stale bool
		if err := t.tx.QueryRowContext(ctx, t.d.q.inboxStale, r.CreatedAt.UnixMicro(), r.Window.Microseconds()).Scan(&stale); err != nil {
			return driver.InboxResult{}, wrap("inbox", err)
		}
		if stale {
			return driver.InboxResult{Stale: true}, nil
		}
	}
	var hash any
	if r.PayloadHash != nil {
		hash = r.PayloadHash
	}
	res, err := t.tx.ExecContext(ctx, t.d.q.inboxRecord, r.Consumer, r.Key, uuid.UUID(r.MessageID).String(), hash)
	if err != nil {
		return driver.InboxResult{}, wrap("inbox", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return driver.InboxResult{}, nil
	}
	var first string
	var firstHash []byte
	if err := t.tx.QueryRowContext(ctx, t.d.q.inboxFirst, r.Consumer, r.Key).Scan(&first, &firstHash); err != nil {
		return driver.InboxResult{}, wrap("inbox", err)
	}
	out := driver.InboxResult{Duplicate: true, FirstPayloadHash: firstHash}
	if id, err := uuid.Parse(first); err == nil {
		out.FirstMessageID = id
	}
	return out, nil
}

func (t *tx) Offset(ctx context.Context, consumer, source string, partition int32) (int64, bool, error) {
	var off int64
	err := t.tx.QueryRowContext(ctx, t.d.q.offsetRead, consumer, source, partition).Scan(&off)
	if err == sql.ErrNoRows {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, wrap("offset", err)
	}
	return off, true, nil
}

func (t *tx) SetOffset(ctx context.Context, consumer, source string, partition int32, offset int64) error {
	_, err := t.tx.ExecContext(ctx, t.d.q.offsetSet, consumer, source, partition, offset)
	return wrap("set offset", err)
}
