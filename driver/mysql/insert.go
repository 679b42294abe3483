package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/sqlkit"
)

// RefusedError is a row the outbox refused by its own rules, the ones
// every plain SQL INSERT meets too (a type with no owner is a
// *driver.UnownedTypeError instead). Reason is the table's message, which
// says what to fix. Nothing of the call was written.
type RefusedError struct {
	Reason string
}

func (e *RefusedError) Error() string {
	return "mensageria/mysql: enqueue refused: " + e.Reason
}

// unownedMark is in the message of the outbox trigger's refusal of a type
// without an owner (migrations/002_catalog.sql).
const unownedMark = "has no owner app in"

// refusal turns the outbox's refusals into typed errors: the triggers'
// SIGNAL (1644), a value longer than its column (1406), a payload the JSON
// column refuses (MySQL 3140; MariaDB's JSON CHECK, 4025). SIGNAL takes a
// literal, so an unowned type is named from the rows: the first one the
// catalog lacks, read in the same transaction (queries/owned_types.sql).
func (d *Driver) refusal(ctx context.Context, w writer, rows []driver.InsertRow, err error) error {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		return wrap("enqueue", err)
	}
	switch me.Number {
	case 1644:
	case 1406:
		switch {
		case strings.Contains(me.Message, "'type'"):
			return &RefusedError{Reason: "mensageria: the message type is longer than 200 bytes; use a shorter type name"}
		case strings.Contains(me.Message, "'key'"):
			return &RefusedError{Reason: "mensageria: the key is longer than 1000 bytes of UTF-8; use a shorter natural key, such as an id"}
		}
		return &RefusedError{Reason: me.Message}
	case 3140, 4025, 3819:
		return &RefusedError{Reason: "mensageria: the payload or the headers are not valid JSON (" + me.Message + ")"}
	default:
		return wrap("enqueue", err)
	}
	if !strings.Contains(me.Message, unownedMark) {
		return &RefusedError{Reason: me.Message}
	}
	types := make([]string, 0, len(rows))
	for _, r := range rows {
		types = append(types, r.Type)
	}
	types = sqlkit.Dedupe(types)
	owned := map[string]bool{}
	rs, qerr := w.QueryContext(ctx, withList(d.q.ownedTypes, len(types)), sqlkit.Args(types)...)
	if qerr == nil {
		for rs.Next() {
			var n string
			if qerr = rs.Scan(&n); qerr != nil {
				break
			}
			owned[n] = true
		}
		if qerr == nil {
			qerr = rs.Err()
		}
		rs.Close()
	}
	if qerr != nil {
		return wrap("enqueue", errors.Join(err, qerr))
	}
	for _, t := range types {
		if !owned[t] {
			return &driver.UnownedTypeError{Type: t}
		}
	}
	return &driver.UnownedTypeError{}
}

// chunk bounds the rows (and ids) of one statement.
const chunk = 500

// Insert writes p.Rows in one transaction of its own. A row the outbox
// refuses fails the call with a *driver.UnownedTypeError or a
// *RefusedError, and nothing is written.
func (d *Driver) Insert(ctx context.Context, p driver.InsertParams) error {
	if len(p.Rows) == 0 {
		return nil
	}
	err := d.write(ctx, func(w writer, _ int64) error {
		return d.insertRows(ctx, w, p.Rows)
	})
	if err != nil {
		return err
	}
	if p.Notify {
		d.notify()
	}
	return nil
}

// InsertTx writes p.Rows inside the caller's *sql.Tx. A failure rolls back
// to a savepoint, so nothing of this call is written and the caller's
// transaction stays usable (unless the server chose it as a deadlock
// victim, which rolls back the whole transaction).
//
// With Notify the listeners of this Driver are woken at once, before the
// caller commits: a relay that claims before the commit finds nothing and
// polls again.
func (d *Driver) InsertTx(ctx context.Context, tx any, p driver.InsertParams) error {
	stx, ok := tx.(*sql.Tx)
	if !ok || stx == nil {
		return &driver.TxTypeError{Driver: "mysql", Got: fmt.Sprintf("%T", tx), Want: []string{"*sql.Tx"}}
	}
	if len(p.Rows) == 0 {
		return nil
	}
	if err := d.inSavepoint(ctx, stx, func() error { return d.insertRows(ctx, stx, p.Rows) }); err != nil {
		return err
	}
	if p.Notify {
		d.notify()
	}
	return nil
}

// inSavepoint runs fn inside a savepoint of stx (queries/savepoint*.sql),
// rolled back to when fn fails.
func (d *Driver) inSavepoint(ctx context.Context, stx *sql.Tx, fn func() error) error {
	if _, err := stx.ExecContext(ctx, d.q.savepoint); err != nil {
		return wrap("savepoint", err)
	}
	if err := fn(); err != nil {
		bg := context.WithoutCancel(ctx)
		_, _ = stx.ExecContext(bg, d.q.savepointRollback)
		_, _ = stx.ExecContext(bg, d.q.savepointRelease)
		return err
	}
	_, err := stx.ExecContext(ctx, d.q.savepointRelease)
	return wrap("savepoint", err)
}

// insertRows writes rows, chunk of them a statement (queries/insert.sql,
// or queries/insert_scheduled.sql when one of them has a NotBefore).
func (d *Driver) insertRows(ctx context.Context, w writer, rows []driver.InsertRow) error {
	for len(rows) > 0 {
		n := min(len(rows), chunk)
		args := make([]any, 0, n*5)
		for _, r := range rows[:n] {
			var headers any
			if len(r.Headers) > 0 {
				headers = string(r.Headers)
			}
			payload := string(r.Payload)
			if payload == "" {
				payload = "{}"
			}
			args = append(args, uuid.UUID(r.MessageID).String(), r.Type, r.Key, payload, headers)
		}
		q := withRows(d.q.insert, n)
		if (&driver.InsertParams{Rows: rows[:n]}).Scheduled() {
			q, args = withRows(d.q.insertScheduled, n), scheduledArgs(rows[:n], args)
		}
		if _, err := w.ExecContext(ctx, q, args...); err != nil {
			return d.refusal(ctx, w, rows[:n], err)
		}
		rows = rows[n:]
	}
	return nil
}

// scheduledArgs adds each row's NotBefore, in unix microseconds, to the
// five arguments per row of args.
func scheduledArgs(rows []driver.InsertRow, args []any) []any {
	out := make([]any, 0, len(rows)*6)
	for i, r := range rows {
		var notBefore int64
		if !r.NotBefore.IsZero() {
			notBefore = r.NotBefore.UnixMicro()
		}
		out = append(out, args[i*5:i*5+5]...)
		out = append(out, notBefore)
	}
	return out
}
