package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/uuid"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/xadm/mensageria/driver"
)

// RefusedError is a row the outbox table refused by its own rules, the
// ones every plain SQL INSERT meets too (a type with no owner is a
// *driver.UnownedTypeError instead). Reason is the table's message, the
// trigger's or a column CHECK's, which says what to fix. Nothing of the
// call was written.
type RefusedError struct {
	Reason string
}

func (e *RefusedError) Error() string {
	return "mensageria/sqlite: enqueue refused: " + e.Reason
}

// unownedMark is in the message of the outbox trigger's refusal of a type
// without an owner (migrations/003_catalog.sql).
const unownedMark = "has no owner app in"

// refusal turns the outbox's refusals (the trigger's RAISE, the columns'
// named CHECKs) into typed errors. RAISE takes only a literal, so an
// unowned type is named from the rows: the first one the catalog lacks,
// read in the same transaction as the refused insert.
func (d *Driver) refusal(ctx context.Context, w writer, rows []driver.InsertRow, err error) error {
	var se *msqlite.Error
	if !errors.As(err, &se) {
		return wrap("enqueue", err)
	}
	code := se.Code()
	if code != sqlite3.SQLITE_CONSTRAINT_CHECK && code != sqlite3.SQLITE_CONSTRAINT_TRIGGER {
		return wrap("enqueue", err)
	}
	// The table's own messages start with "mensageria: " (a CHECK's is its
	// name); SQLite's wrapping and the result code are dropped.
	msg := strings.TrimSpace(strings.TrimSuffix(se.Error(), fmt.Sprintf("(%d)", code)))
	if i := strings.Index(msg, "mensageria: "); i >= 0 {
		msg = msg[i:]
	}
	if code == sqlite3.SQLITE_CONSTRAINT_CHECK || !strings.Contains(msg, unownedMark) {
		return &RefusedError{Reason: msg}
	}
	types := make([]string, len(rows))
	for i, r := range rows {
		types[i] = r.Type
	}
	var typ string
	qerr := w.QueryRowContext(ctx, d.q.unownedType, stringsJSON(types)).Scan(&typ)
	if qerr != nil && !errors.Is(qerr, sql.ErrNoRows) {
		return wrap("enqueue", errors.Join(err, qerr))
	}
	return &driver.UnownedTypeError{Type: typ}
}

// chunk bounds the host parameters of one statement well under SQLite's
// limit.
const chunk = 200

// Insert writes p.Rows in one transaction of its own. A row the outbox
// table refuses fails the call with a *driver.UnownedTypeError (a type no
// app owns) or a *RefusedError, and nothing is written.
//
// Unlike the driver's other writes it runs in a *sql.Tx (immediate with
// Open's _txlock; on a caller's *sql.DB without it, deferred, which is as
// safe here because its first statement writes), so that the prepared
// INSERTs are reused per connection: preparing one compiles the outbox's
// trigger, most of an enqueue's cost.
func (d *Driver) Insert(ctx context.Context, p driver.InsertParams) error {
	if len(p.Rows) == 0 {
		return nil
	}
	select {
	case d.gate <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("mensageria/sqlite: waiting for the write lock: %w", ctx.Err())
	}
	defer func() { <-d.gate }()
	// Prepared before the transaction holds a connection: preparing on
	// the *sql.DB takes one, and a caller's pool may have only one.
	for n := len(p.Rows); n > 0; n -= min(n, chunk) {
		d.inserts.prepare(ctx, d, min(n, chunk))
	}
	// Not cancellable once begun: an interrupted COMMIT leaves the outcome
	// unknown. A cancellation before it rolls back.
	tx, err := d.db.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		return wrap("begin", err)
	}
	if err := d.insertRows(ctx, tx, p.Rows); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := ctx.Err(); err != nil {
		_ = tx.Rollback()
		return wrap("enqueue", err)
	}
	if err := tx.Commit(); err != nil {
		return wrap("commit", err)
	}
	if p.Notify {
		d.notify()
	}
	return nil
}

// InsertTx writes p.Rows inside the caller's *sql.Tx. A failure rolls back to
// a savepoint, so nothing of this call is written and the caller's
// transaction stays usable.
//
// With Notify the listeners are woken at once, before the caller commits:
// the insert holds SQLite's write lock until then, so a relay that wakes
// and claims waits for the commit (or rollback) instead of missing the rows.
func (d *Driver) InsertTx(ctx context.Context, tx any, p driver.InsertParams) error {
	stx, ok := tx.(*sql.Tx)
	if !ok || stx == nil {
		return &driver.TxTypeError{Driver: "sqlite", Got: fmt.Sprintf("%T", tx), Want: []string{"*sql.Tx"}}
	}
	if len(p.Rows) == 0 {
		return nil
	}
	if _, err := stx.ExecContext(ctx, "SAVEPOINT mensageria_enqueue"); err != nil {
		return wrap("enqueue", err)
	}
	if err := d.insertRows(ctx, stx, p.Rows); err != nil {
		bg := context.WithoutCancel(ctx)
		_, _ = stx.ExecContext(bg, "ROLLBACK TO mensageria_enqueue")
		_, _ = stx.ExecContext(bg, "RELEASE mensageria_enqueue")
		return err
	}
	if _, err := stx.ExecContext(ctx, "RELEASE mensageria_enqueue"); err != nil {
		return wrap("enqueue", err)
	}
	if p.Notify {
		d.notify()
	}
	return nil
}

// cachedRows are the row counts whose INSERT stays prepared: the usual
// enqueue is a few rows, and a long call goes in full chunks.
func cachedRows(n int) bool { return n <= 8 || n == chunk }

// insertStmts keeps one prepared INSERT per cached row count. database/sql
// prepares a *sql.Stmt again on each connection it runs on, keeps it there
// for the next transaction, and finalizes it when it closes the
// connection. They are prepared only where no connection of the caller's
// is held (Migrate, and Insert before it begins): InsertTx, inside the
// caller's transaction, only uses what exists.
type insertStmts struct {
	mu     sync.Mutex
	m      map[int]*sql.Stmt
	closed bool
}

func (c *insertStmts) get(n int) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[n]
}

// prepare makes the statement of n rows if it is cached and missing. A
// failure (no schema yet) leaves it to the plain statement to report.
func (c *insertStmts) prepare(ctx context.Context, d *Driver, n int) {
	if !cachedRows(n) || c.get(n) != nil {
		return
	}
	st, err := d.db.PrepareContext(ctx, d.insertQuery(n))
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.m[n] != nil {
		_ = st.Close()
		return
	}
	if c.m == nil {
		c.m = map[int]*sql.Stmt{}
	}
	c.m[n] = st
}

// prepareInserts readies the statements of the usual enqueues once the
// schema is there.
func (d *Driver) prepareInserts(ctx context.Context) {
	for n := 1; n <= 8; n++ {
		d.inserts.prepare(ctx, d, n)
	}
}

func (c *insertStmts) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, st := range c.m {
		_ = st.Close()
	}
	c.m = nil
}

// insertQuery is the INSERT of n rows. Built here, not read from queries/:
// its VALUES list has n rows of five parameters, n set by the call, and
// each count kept is prepared once per connection (insertStmts).
func (d *Driver) insertQuery(n int) string {
	return "INSERT INTO " + d.prefix + "outbox (message_id, type, key, payload, headers) VALUES " +
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", n), ", ")
}

func (d *Driver) insertRows(ctx context.Context, tx *sql.Tx, rows []driver.InsertRow) error {
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
			// Text, not blob: SQLite's JSON functions and other languages'
			// plain INSERTs then see the same column type.
			args = append(args, uuid.UUID(r.MessageID).String(), r.Type, r.Key, payload, headers)
		}
		query := d.insertQuery(n)
		var err error
		st := d.inserts.get(n)
		if (&driver.InsertParams{Rows: rows[:n]}).Scheduled() {
			query, args, st = d.scheduledInsert(n), scheduledArgs(rows[:n], args), nil
		}
		if st != nil {
			_, err = tx.StmtContext(ctx, st).ExecContext(ctx, args...)
			// A caller's transaction of another *sql.DB on the same file
			// cannot use this handle's statements; nothing ran.
			if err != nil && strings.Contains(err.Error(), "statement from different database") {
				st = nil
			}
		}
		if st == nil {
			_, err = tx.ExecContext(ctx, query, args...)
		}
		if err != nil {
			return d.refusal(ctx, tx, rows[:n], err)
		}
		rows = rows[n:]
	}
	return nil
}

// scheduledInsert is the INSERT of rows that also sets available_at: the
// later of each row's NotBefore (0 for none) and the database clock, so a
// NotBefore in the past is due at once, as a row without one is. It is not
// kept prepared: a scheduled enqueue is the rare one.
func (d *Driver) scheduledInsert(n int) string {
	return "INSERT INTO " + d.prefix + "outbox (message_id, type, key, payload, headers, available_at) VALUES " + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, max(?, "+nowExpr+")), ", n), ", ")
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
