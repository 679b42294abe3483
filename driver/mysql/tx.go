package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

// InTx runs fn in one READ COMMITTED *sql.Tx (Raw returns it). The commit
// is as durable as the server's: innodb_flush_log_at_trx_commit=1, the
// default, flushes it to disk.
func (d *Driver) InTx(ctx context.Context, fn func(ctx context.Context, tx driver.Tx) error) (err error) {
	stx, err := d.db.BeginTx(context.WithoutCancel(ctx), txOptions)
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

// InboxRecord inserts the record unless its (consumer, key) exists. A
// concurrent twin's INSERT waits on the first one's key lock; when the
// first commits it finds the key taken and reads the first record with a
// locking read, which sees the committed row.
func (t *tx) InboxRecord(ctx context.Context, r driver.InboxRecord) (driver.InboxResult, error) {
	if r.Consumer == "" || r.Key == "" {
		return driver.InboxResult{}, fmt.Errorf("mensageria/mysql: inbox record needs a consumer and a key")
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

// Offset reads the position locked to this transaction. A partition with
// no row yet gets one without a position first: a read of a missing row
// locks nothing at READ COMMITTED, so two first appliers would both see
// "no position"; on the inserted key the second waits for the first to
// end, then reads what it stored.
func (t *tx) Offset(ctx context.Context, consumer, source string, partition int32) (int64, bool, error) {
	if _, err := t.tx.ExecContext(ctx, t.d.q.offsetCreate, consumer, source, partition); err != nil {
		return 0, false, wrap("offset", err)
	}
	var off sql.NullInt64
	err := t.tx.QueryRowContext(ctx, t.d.q.offsetRead, consumer, source, partition).Scan(&off)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, wrap("offset", err)
	}
	return off.Int64, off.Valid, nil
}

func (t *tx) SetOffset(ctx context.Context, consumer, source string, partition int32, offset int64) error {
	_, err := t.tx.ExecContext(ctx, t.d.q.offsetSet, consumer, source, partition, offset)
	return wrap("set offset", err)
}
