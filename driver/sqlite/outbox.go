package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	msqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/xadm/mensageria/driver"
)

// queries holds the statements whose table names depend on the prefix.
type queries struct {
	insertHead string
	jobCols    string
	listCols   string // jobCols and the type's owner
	settled    string // guard: still leased to the token, lease not expired
}

func newQueries(p string) queries {
	// A row in doubt is stored pending and read as in doubt
	// (driver.StateInDoubt); ?1 of a query that reads jobCols is the
	// database's now.
	jobCols := "id, message_id, type, key, payload, headers, CASE WHEN " + doubtCond + " THEN 'in_doubt' ELSE state END, attempts, created_at, available_at, delivered_at, last_error, last_route, attempted_at"
	return queries{
		insertHead: "INSERT INTO " + p + "outbox (message_id, type, key, payload, headers) VALUES ",
		jobCols:    jobCols,
		listCols:   jobCols + ", (SELECT w.app FROM " + p + "owners w WHERE w.kind = 'type' AND w.name = " + p + "outbox.type)",
		settled:    " AND state = 'pending' AND lease_token = ? AND lease_until > ?",
	}
}

// doubtCond is true of a row in doubt: pending, marked by an at-most-once
// attempt (queries/mark.sql), not under a live lease (?1 is now).
const doubtCond = "(state = 'pending' AND attempted_at IS NOT NULL AND (lease_until IS NULL OR lease_until <= ?1))"

// schedCond is true of a scheduled row: pending, not due yet (?1 is now),
// never attempted and no error recorded (a retry's backoff records one).
// A claim counts an attempt, so a leased row, whose available_at a claim
// sets to its lease's end, is never one. Never NULL, so that NOT of it is
// true of every other row, whatever a plain INSERT stored.
const schedCond = "coalesce(state = 'pending' AND attempted_at IS NULL AND typeof(available_at) = 'integer' AND available_at > ?1 AND attempts = 0 AND last_error IS NULL, 0)"

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
	qerr := w.QueryRowContext(ctx, "SELECT value FROM json_each(?) WHERE value NOT IN (SELECT name FROM "+d.prefix+"owners WHERE kind = 'type') LIMIT 1",
		stringsJSON(types)).Scan(&typ)
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

// insertQuery is the INSERT of n rows.
func (d *Driver) insertQuery(n int) string {
	return d.q.insertHead + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", n), ", ")
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
	head := strings.Replace(d.q.insertHead, "headers)", "headers, available_at)", 1)
	return head + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, max(?, "+nowExpr+")), ", n), ", ")
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

// unionLimit keeps the per-type claim under SQLite's compound-select limit
// (500 terms); beyond it one IN-list scan is used.
const unionLimit = 200

// Claim leases due rows of p.Types in one immediate transaction. Each type
// is scanned on its own index range (type, available_at) and the results
// merged, so a large backlog of other types costs nothing.
func (d *Driver) Claim(ctx context.Context, p driver.ClaimParams) ([]driver.Job, error) {
	types := dedupe(p.Types)
	if len(types) == 0 || p.Limit <= 0 {
		return nil, nil
	}
	if p.Lease <= 0 {
		return nil, fmt.Errorf("mensageria/sqlite: claim: lease must be positive, got %s", p.Lease)
	}
	ordered := map[string]bool{}
	for _, t := range p.OrderedTypes {
		ordered[t] = true
	}
	var jobs []driver.Job
	err := d.write(ctx, func(w writer, now int64) error {
		if p.Fence != nil {
			var epoch int64
			var holder string
			err := w.QueryRowContext(ctx, "SELECT epoch, holder FROM "+d.prefix+"leader WHERE app = ?", p.Fence.App).Scan(&epoch, &holder)
			if err == sql.ErrNoRows || (err == nil && (epoch != p.Fence.Epoch || holder == "")) {
				return nil // deposed: claim nothing
			}
			if err != nil {
				return wrap("claim fence", err)
			}
		}
		query, args := d.claimStatement(p, types, ordered, now)
		rows, err := w.QueryContext(ctx, query, args...)
		if err != nil {
			return wrap("claim", err)
		}
		jobs, err = scanJobs(rows, false)
		return err
	})
	if err != nil {
		return nil, err
	}
	// RETURNING follows no particular order; deliver oldest first.
	slices.SortFunc(jobs, func(a, b driver.Job) int { return cmp.Compare(a.ID, b.ID) })
	return jobs, nil
}

// claimStatement is the UPDATE … RETURNING that leases the due rows of
// types at now: one index range per type merged (up to unionLimit types),
// else one IN-list scan; an ordered type only at the head of its key.
func (d *Driver) claimStatement(p driver.ClaimParams, types []string, ordered map[string]bool, now int64) (string, []any) {
	o := d.prefix + "outbox"
	// The oldest unsettled row of its key: no pending row of the same
	// (type, key) with a smaller id, whether leased, waiting to retry or due.
	headOfKey := " AND NOT EXISTS (SELECT 1 FROM " + o + " b WHERE b.type = o.type AND b.key = o.key AND b.state = 'pending' AND b.id < o.id)"
	until := now + p.Lease.Microseconds()
	// ?1 is now, for the RETURNING columns; a marked row (an
	// at-most-once attempt that may have reached its receiver) is
	// never claimed again. The attempts a plain INSERT of a version
	// before 7 gave a row count from 0 to 1,000,000,000 (one of
	// 2^63-1 turned real on "+ 1").
	args := []any{now, p.Token, until, until}
	var sb strings.Builder
	sb.WriteString("UPDATE " + o + " SET lease_token = ?2, lease_until = ?3, available_at = ?4, attempts = CASE WHEN typeof(attempts) = 'integer' THEN min(max(attempts, 0), 1000000000) ELSE 0 END + 1 WHERE id IN (")
	if len(types) <= unionLimit {
		sb.WriteString("SELECT id FROM (")
		for i, t := range types {
			if i > 0 {
				sb.WriteString(" UNION ALL ")
			}
			sb.WriteString("SELECT * FROM (SELECT o.id, o.available_at FROM " + o + " o WHERE o.state = 'pending' AND o.type = ? AND o.available_at <= ? AND o.attempted_at IS NULL")
			if ordered[t] {
				sb.WriteString(headOfKey)
			}
			sb.WriteString(" ORDER BY o.available_at, o.id LIMIT ?)")
			args = append(args, t, now, p.Limit)
		}
		sb.WriteString(") ORDER BY available_at, id LIMIT ?)")
		args = append(args, p.Limit)
	} else {
		var plain, ord []string
		for _, t := range types {
			if ordered[t] {
				ord = append(ord, t)
			} else {
				plain = append(plain, t)
			}
		}
		sb.WriteString("SELECT o.id FROM " + o + " o WHERE o.state = 'pending' AND o.available_at <= ? AND o.attempted_at IS NULL AND (o.type IN (" + marks(len(plain)) + ") OR (o.type IN (" + marks(len(ord)) + ")" + headOfKey + ")) ORDER BY o.available_at, o.id LIMIT ?)")
		args = append(args, now)
		for _, t := range plain {
			args = append(args, t)
		}
		for _, t := range ord {
			args = append(args, t)
		}
		args = append(args, p.Limit)
	}
	sb.WriteString(" RETURNING " + d.q.jobCols)
	return sb.String(), args
}

// marks returns n comma-separated placeholders; with n == 0 it returns a
// NULL, which matches nothing.
func marks(n int) string {
	if n == 0 {
		return "NULL"
	}
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func dedupe(s []string) []string {
	out := make([]string, 0, len(s))
	seen := map[string]bool{}
	for _, v := range s {
		if v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// scanJobs reads rows of jobCols, or of listCols when withOwner. SQLite
// stores what an INSERT gives whatever a column's type, so the columns a
// plain INSERT could have filled with what the driver cannot read are read
// apart (readRow): such a row comes back with driver.Job.Unreadable naming
// them, for the relay to park, never as an error that fails every other
// row of the claim or the listing.
func scanJobs(rows *sql.Rows, withOwner bool) ([]driver.Job, error) {
	defer rows.Close()
	var jobs []driver.Job
	for rows.Next() {
		var (
			j                                             driver.Job
			state                                         string
			lastErr, lastRoute                            sql.NullString
			owner                                         sql.NullString
			mid, payload, headers                         any
			attempts, created, available, delivered, atAt any
		)
		dest := []any{&j.ID, &mid, &j.Type, &j.Key, &payload, &headers, &state, &attempts, &created, &available, &delivered, &lastErr, &lastRoute, &atAt}
		if withOwner {
			dest = append(dest, &owner)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, wrap("reading outbox rows", err)
		}
		j.LastRoute = lastRoute.String
		j.Owner = owner.String
		j.State = driver.State(state)
		j.LastError = lastErr.String
		r := rowReader{why: &j.Unreadable}
		j.MessageID = r.uuid("message_id", mid)
		j.Payload = r.json("payload", payload, false)
		j.Headers = r.json("headers", headers, true)
		j.Attempt = int(r.integer("attempts", attempts, -1<<31, 1<<31-1))
		j.CreatedAt = r.time("created_at", created)
		j.AvailableAt = r.time("available_at", available)
		if delivered != nil {
			t := r.time("delivered_at", delivered)
			j.DeliveredAt = &t
		}
		if atAt != nil {
			t := r.time("attempted_at", atAt)
			j.AttemptedAt = &t
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("reading outbox rows", err)
	}
	return jobs, nil
}

// rowReader reads the columns of one row as the driver stores them,
// naming in *why each one that holds something else.
type rowReader struct{ why *string }

func (r rowReader) bad(column, what string) {
	*r.why = driver.UnreadableColumn(*r.why, column, what)
}

// text is a TEXT or BLOB value's bytes; ok is false for anything else.
func text(v any) ([]byte, bool) {
	switch x := v.(type) {
	case string:
		return []byte(x), true
	case []byte:
		return x, true
	}
	return nil, false
}

// shown is v as an operator reads it in a reason, cut short.
func shown(v any) string {
	s := fmt.Sprintf("%v", v)
	if b, ok := v.([]byte); ok {
		s = fmt.Sprintf("%q", b)
	} else if _, ok := v.(string); ok {
		s = fmt.Sprintf("%q", v)
	}
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return fmt.Sprintf("%s %s", sqliteType(v), s)
}

func sqliteType(v any) string {
	switch v.(type) {
	case int64:
		return "integer"
	case float64:
		return "real"
	case string:
		return "text"
	case []byte:
		return "blob"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

func (r rowReader) uuid(column string, v any) [16]byte {
	if b, ok := text(v); ok {
		if id, err := uuid.ParseBytes(b); err == nil && len(b) == 36 {
			return id
		}
	}
	r.bad(column, "is not a UUID ("+shown(v)+")")
	return [16]byte{}
}

// json is a JSON text (NULL allowed when nullable).
func (r rowReader) json(column string, v any, nullable bool) []byte {
	if v == nil && nullable {
		return nil
	}
	if b, ok := text(v); ok && json.Valid(b) {
		return b
	}
	r.bad(column, "is not JSON text ("+shown(v)+")")
	return nil
}

func (r rowReader) integer(column string, v any, lo, hi int64) int64 {
	if n, ok := v.(int64); ok && n >= lo && n <= hi {
		return n
	}
	r.bad(column, "is not an integer from "+fmt.Sprint(lo)+" to "+fmt.Sprint(hi)+" ("+shown(v)+")")
	return 0
}

// time reads unix microseconds in years 1 to 9999 UTC: RFC 3339 and
// JSON, which every transport, listing and console writes times in, hold
// no other.
func (r rowReader) time(column string, v any) time.Time {
	n, ok := v.(int64)
	if !ok {
		r.bad(column, "is not an integer of unix microseconds ("+shown(v)+")")
		return time.Time{}
	}
	t := fromMicros(n)
	if y := t.Year(); y < 1 || y > 9999 {
		r.bad(column, "is out of range ("+t.Format(time.RFC3339Nano)+"): years 1 to 9999 in UTC")
		return time.Time{}
	}
	return t
}

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// Settle records the outcomes of one claimed batch in one transaction; each
// update is guarded by the token and the lease. The rows it did not change
// are sorted by one more read in the same transaction: gone or leased to
// another token is Fenced, still ours but past the lease is Expired.
func (d *Driver) Settle(ctx context.Context, p driver.SettleParams) (driver.SettleResult, error) {
	all := p.IDs()
	if len(all) == 0 {
		return driver.SettleResult{}, nil
	}
	var res driver.SettleResult
	err := d.write(ctx, func(w writer, now int64) error {
		st := &settlement{d: d, ctx: ctx, w: w, now: now, p: p, settled: map[int64]bool{}, counts: map[string]int64{}}
		if err := st.delivered(); err != nil {
			return err
		}
		if err := st.released(); err != nil {
			return err
		}
		if err := st.failed(); err != nil {
			return err
		}
		var err error
		res, err = st.sort(all)
		return err
	})
	if err != nil {
		return driver.SettleResult{}, err
	}
	return res, nil
}

// settlement is one Settle's transaction: the rows it changed so far, and
// how many of them were delivered, per type.
type settlement struct {
	d   *Driver
	ctx context.Context
	w   writer
	now int64
	p   driver.SettleParams

	settled map[int64]bool
	counts  map[string]int64 // delivered rows per type
}

// returning runs an UPDATE or DELETE ending in RETURNING id, type and
// records what it changed.
func (st *settlement) returning(q string, args []any, count bool) error {
	rows, err := st.w.QueryContext(st.ctx, q+" RETURNING id, type", args...)
	if err != nil {
		return wrap("settle", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var typ string
		if err := rows.Scan(&id, &typ); err != nil {
			return wrap("settle", err)
		}
		st.settled[id] = true
		if count {
			st.counts[typ]++
		}
	}
	return wrap("settle", rows.Err())
}

// byIDs runs head on ids, chunk by chunk, each guarded by the token and
// the lease.
func (st *settlement) byIDs(head string, setArgs []any, ids []int64, count bool) error {
	for len(ids) > 0 {
		n := min(len(ids), chunk)
		args := append([]any{}, setArgs...)
		for _, id := range ids[:n] {
			args = append(args, id)
		}
		args = append(args, st.p.Token, st.now)
		if err := st.returning(head+" WHERE id IN ("+marks(n)+")"+st.d.q.settled, args, count); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// delivered deletes (or, kept, marks) the delivered rows and counts them
// per type and minute, so Stats knows the recent deliveries without the
// rows.
func (st *settlement) delivered() error {
	o, now := st.d.prefix+"outbox", st.now
	if st.p.KeepDelivered {
		if err := st.byIDs("UPDATE "+o+" SET state = 'delivered', delivered_at = ?, lease_token = NULL, lease_until = NULL", []any{now}, st.p.Delivered, true); err != nil {
			return err
		}
	} else if err := st.byIDs("DELETE FROM "+o, nil, st.p.Delivered, true); err != nil {
		return err
	}
	if err := st.d.countDelivered(st.ctx, st.w, st.counts, now); err != nil {
		return wrap("settle counts", err)
	}
	return nil
}

// countDelivered adds the rows delivered at now, per type, to the minute's
// counts.
func (d *Driver) countDelivered(ctx context.Context, w writer, perType map[string]int64, now int64) error {
	minute := now - now%time.Minute.Microseconds()
	for typ, n := range perType {
		if _, err := w.ExecContext(ctx, "INSERT INTO "+d.prefix+"delivered_counts (type, minute, n) VALUES (?, ?, ?) ON CONFLICT (type, minute) DO UPDATE SET n = n + excluded.n",
			typ, minute, n); err != nil {
			return err
		}
	}
	return nil
}

// released gives a released row its attempt back: it was not attempted.
// A release also clears an at-most-once mark: the relay releases only
// rows it did not send.
func (st *settlement) released() error {
	return st.byIDs("UPDATE "+st.d.prefix+"outbox SET attempts = max(attempts - 1, 0), available_at = ?, attempted_at = NULL, lease_token = NULL, lease_until = NULL", []any{st.now}, st.p.Release, false)
}

// failed records the retries, the dead and the rows left in doubt. An
// empty route is stored as none, so a row never shows the route of an
// older attempt next to a newer error.
func (st *settlement) failed() error {
	o, now, p := st.d.prefix+"outbox", st.now, st.p
	// An uncounted retry failed on its destination, not on its own:
	// the attempt the claim counted is taken back.
	for _, r := range p.Retry {
		delay := max(r.Delay, 0)
		back := 0
		if r.Uncounted {
			back = 1
		}
		// A retry says the request never reached the receiver, so an
		// at-most-once mark is cleared.
		if err := st.returning("UPDATE "+o+" SET available_at = ?, attempts = max(attempts - ?, 0), attempted_at = NULL, last_error = ?, last_route = NULLIF(?, ''), lease_token = NULL, lease_until = NULL WHERE id = ?"+st.d.q.settled,
			[]any{now + delay.Microseconds(), back, r.Error, r.Route, r.ID, p.Token, now}, false); err != nil {
			return err
		}
	}
	for _, f := range p.Dead {
		if err := st.returning("UPDATE "+o+" SET state = 'dead', available_at = ?, last_error = ?, last_route = NULLIF(?, ''), lease_token = NULL, lease_until = NULL WHERE id = ?"+st.d.q.settled,
			[]any{now, f.Error, f.Route, f.ID, p.Token, now}, false); err != nil {
			return err
		}
	}
	// Left in doubt: the lease given up, the mark kept (set now when
	// there was none), and a probe may take the row after ProbeAfter.
	for _, f := range p.InDoubt {
		if err := st.returning("UPDATE "+o+" SET attempted_at = coalesce(attempted_at, ?), available_at = ?, last_error = ?, last_route = NULLIF(?, ''), lease_token = NULL, lease_until = NULL WHERE id = ?"+st.d.q.settled,
			[]any{now, now + max(f.ProbeAfter, 0).Microseconds(), f.Error, f.Route, f.ID, p.Token, now}, false); err != nil {
			return err
		}
	}
	return nil
}

// sort tells the rows of all this settlement changed from those it could
// not: still ours but past the lease (Expired), or gone or leased to
// another token (Fenced).
func (st *settlement) sort(all []int64) (driver.SettleResult, error) {
	var res driver.SettleResult
	var rest []int64
	for _, id := range all {
		if st.settled[id] {
			res.Settled = append(res.Settled, id)
		} else {
			rest = append(rest, id)
		}
	}
	if len(rest) == 0 {
		return res, nil
	}
	expired := map[int64]bool{}
	rows, err := st.w.QueryContext(st.ctx, "SELECT id FROM "+st.d.prefix+"outbox WHERE id IN (SELECT value FROM json_each(?)) AND state = 'pending' AND lease_token = ? AND lease_until <= ?",
		int64sJSON(rest), st.p.Token, st.now)
	if err != nil {
		return res, wrap("settle", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return res, wrap("settle", err)
		}
		expired[id] = true
	}
	if err := rows.Err(); err != nil {
		return res, wrap("settle", err)
	}
	for _, id := range rest {
		if expired[id] {
			res.Expired = append(res.Expired, id)
		} else {
			res.Fenced = append(res.Fenced, id)
		}
	}
	return res, nil
}

// defaultPurgeBatch bounds one purge pass when the caller gives no batch.
const defaultPurgeBatch = 1000

// Purge deletes, in one transaction, at most p.Batch delivered outbox rows
// of p.Types older than p.DeliveredBefore (zero: every delivered row of
// them) and at most p.Batch inbox records of the consumers the catalog
// gives p.App, each older than that consumer's own window; a consumer
// without a window, another app's, or one nobody registered keeps every
// record. Per-minute delivered counts of p.Types older than a day go too.
func (d *Driver) Purge(ctx context.Context, p driver.PurgeParams) (driver.PurgeResult, error) {
	batch := p.Batch
	if batch <= 0 {
		batch = defaultPurgeBatch
	}
	types := stringsJSON(dedupe(p.Types))
	var res driver.PurgeResult
	err := d.write(ctx, func(w writer, now int64) error {
		res = driver.PurgeResult{}
		if len(p.Types) > 0 && p.DeliveredBefore >= 0 {
			o := d.prefix + "outbox"
			// No ORDER BY: everything past the age goes, so which batch goes
			// first does not matter, and without it one probe of the
			// (type, delivered_at) index per type stops at the limit.
			r, err := w.ExecContext(ctx, "DELETE FROM "+o+" WHERE id IN (SELECT id FROM "+o+" WHERE state = 'delivered' AND type IN (SELECT value FROM json_each(?)) AND delivered_at <= ? LIMIT ?)",
				types, now-p.DeliveredBefore.Microseconds(), batch)
			if err != nil {
				return wrap("purge outbox", err)
			}
			n, _ := r.RowsAffected()
			res.Outbox = int(n)
		}
		if p.App != "" {
			cs, err := d.appConsumers(ctx, w, p.App)
			if err != nil {
				return err
			}
			if res.Inbox, err = d.purgeInbox(ctx, w, cs, now, batch); err != nil {
				return err
			}
			if res.InboxQueue, err = d.purgeInboxQueue(ctx, w, cs, now, batch); err != nil {
				return err
			}
		}
		if len(p.Types) > 0 {
			_, err := w.ExecContext(ctx, "DELETE FROM "+d.prefix+"delivered_counts WHERE type IN (SELECT value FROM json_each(?)) AND minute < ?",
				types, now-24*time.Hour.Microseconds())
			return wrap("purge counts", err)
		}
		return nil
	})
	return res, err
}

// purgeInbox deletes up to batch records of app's consumers, each one's
// oldest first on the (consumer, received_at) index, after its window.
// windowed is a consumer of the purging app, with its window in
// microseconds.
type windowed struct {
	name   string
	window int64
}

// appConsumers reads the consumers app owns that have a window: the ones
// whose records and applied queue rows its purge deletes.
func (d *Driver) appConsumers(ctx context.Context, w writer, app string) ([]windowed, error) {
	rows, err := w.QueryContext(ctx, "SELECT name, dedup_window_us FROM "+d.prefix+"owners WHERE app = ? AND kind = 'consumer' AND dedup_window_us IS NOT NULL ORDER BY name", app)
	if err != nil {
		return nil, wrap("purge inbox", err)
	}
	defer rows.Close()
	var cs []windowed
	for rows.Next() {
		var c windowed
		if err := rows.Scan(&c.name, &c.window); err != nil {
			return nil, wrap("purge inbox", err)
		}
		cs = append(cs, c)
	}
	return cs, wrap("purge inbox", rows.Err())
}

func (d *Driver) purgeInbox(ctx context.Context, w writer, cs []windowed, now int64, batch int) (int, error) {
	in := d.prefix + "inbox"
	total := 0
	for _, c := range cs {
		if total >= batch {
			break
		}
		r, err := w.ExecContext(ctx, "DELETE FROM "+in+" WHERE consumer = ?1 AND key IN (SELECT key FROM "+in+" WHERE consumer = ?1 AND received_at < ?2 ORDER BY received_at LIMIT ?3)",
			c.name, now-c.window, batch-total)
		if err != nil {
			return total, wrap("purge inbox", err)
		}
		n, _ := r.RowsAffected()
		total += int(n)
	}
	return total, nil
}

// Stats reports every type with pending or dead rows or deliveries in the
// last hour. Pending counts rows waiting for a claim (due, or waiting for a
// retry); Scheduled counts rows not due yet that were never attempted
// (schedCond); InFlight counts rows under a live lease; DeliveredLastHr
// comes from the per-minute counts, so it includes rows deleted at settle. Owner is the type's app in
// the catalog ("" for none, or unclaimed).
func (d *Driver) Stats(ctx context.Context) ([]driver.TypeStats, error) {
	now, err := d.now(ctx)
	if err != nil {
		return nil, err
	}
	// Only pending and dead rows are read, through their partial indexes;
	// kept delivered rows may be many and are counted elsewhere.
	// A row in doubt counts in the in-doubt column only, with the age of
	// its mark.
	// A scheduled row (schedCond) counts in its own column only, and is
	// not the oldest pending: it is not late.
	rows, err := d.db.QueryContext(ctx, `SELECT type,
		coalesce(sum(state = 'pending' AND attempted_at IS NULL AND (lease_until IS NULL OR lease_until <= ?1) AND NOT `+schedCond+`), 0),
		coalesce(sum(state = 'pending' AND lease_until > ?1), 0),
		coalesce(sum(state = 'dead'), 0),
		0,
		min(CASE WHEN state = 'pending' AND (attempted_at IS NULL OR lease_until > ?1) AND NOT `+schedCond+` AND typeof(created_at) = 'integer' THEN created_at END),
		coalesce(sum(`+doubtCond+`), 0),
		min(CASE WHEN `+doubtCond+` AND typeof(attempted_at) = 'integer' THEN attempted_at END),
		coalesce(sum(`+schedCond+`), 0)
		FROM `+d.prefix+`outbox WHERE state IN ('pending', 'dead') GROUP BY type
		UNION ALL
		SELECT type, 0, 0, 0, sum(n), NULL, 0, NULL, 0 FROM `+d.prefix+`delivered_counts WHERE minute > ?2 GROUP BY type`,
		now, now-time.Hour.Microseconds())
	if err != nil {
		return nil, wrap("stats", err)
	}
	defer rows.Close()
	byType := map[string]*driver.TypeStats{}
	for rows.Next() {
		var s driver.TypeStats
		var oldest, oldestDoubt sql.NullInt64
		if err := rows.Scan(&s.Type, &s.Pending, &s.InFlight, &s.Dead, &s.DeliveredLastHr, &oldest, &s.InDoubt, &oldestDoubt, &s.Scheduled); err != nil {
			return nil, wrap("stats", err)
		}
		s.OldestPending = ageOf(oldest, now)
		s.OldestInDoubt = ageOf(oldestDoubt, now)
		if prev, ok := byType[s.Type]; ok { // one row from each branch
			prev.Pending += s.Pending
			prev.InFlight += s.InFlight
			prev.Dead += s.Dead
			prev.DeliveredLastHr += s.DeliveredLastHr
			prev.OldestPending = max(prev.OldestPending, s.OldestPending)
			prev.InDoubt += s.InDoubt
			prev.OldestInDoubt = max(prev.OldestInDoubt, s.OldestInDoubt)
			prev.Scheduled += s.Scheduled
			continue
		}
		byType[s.Type] = &s
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("stats", err)
	}
	owners, err := d.db.QueryContext(ctx, "SELECT name, app FROM "+d.prefix+"owners WHERE kind = 'type' AND app IS NOT NULL")
	if err != nil {
		return nil, wrap("stats owners", err)
	}
	defer owners.Close()
	for owners.Next() {
		var typ, app string
		if err := owners.Scan(&typ, &app); err != nil {
			return nil, wrap("stats owners", err)
		}
		if s, ok := byType[typ]; ok {
			s.Owner = app
		}
	}
	if err := owners.Err(); err != nil {
		return nil, wrap("stats owners", err)
	}
	out := make([]driver.TypeStats, 0, len(byType))
	for _, s := range byType {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b driver.TypeStats) int { return strings.Compare(a.Type, b.Type) })
	return out, nil
}

var _ driver.DueReporter = (*Driver)(nil)

// NextDue reports how long until the earliest pending row of types that is
// not due yet comes due, on the database clock: a scheduled row or one
// waiting for a retry. A leased row, whose available_at the claim sets to
// its lease's end, and a row in doubt are left out. Each type's range of
// the claim index is read from now on, stopping at its first entry.
func (d *Driver) NextDue(ctx context.Context, types []string) (time.Duration, bool, error) {
	types = dedupe(types)
	if len(types) == 0 {
		return 0, false, nil
	}
	now, err := d.now(ctx)
	if err != nil {
		return 0, false, err
	}
	var next sql.NullInt64
	err = d.db.QueryRowContext(ctx, `SELECT min((SELECT o.available_at FROM `+d.prefix+`outbox o
		WHERE o.state = 'pending' AND o.type = t.value AND o.available_at > ?1 AND typeof(o.available_at) = 'integer' AND o.attempted_at IS NULL
		  AND (o.lease_until IS NULL OR o.lease_until <= ?1)
		ORDER BY o.available_at, o.id LIMIT 1)) FROM json_each(?2) t`, now, stringsJSON(types)).Scan(&next)
	if err != nil {
		return 0, false, wrap("next due", err)
	}
	if !next.Valid {
		return 0, false, nil
	}
	return time.Duration(next.Int64-now) * time.Microsecond, true, nil
}

// ageOf is the age at now of a time in unix microseconds: none for a NULL
// or a time in the future, at most the longest Duration. A row's time may
// be any integer a plain INSERT of a version before 7 wrote; only integers
// are counted (the others make the row unreadable, and the relay parks
// it).
func ageOf(us sql.NullInt64, now int64) time.Duration {
	if !us.Valid || us.Int64 >= now {
		return 0
	}
	if now-us.Int64 <= 0 || now-us.Int64 > math.MaxInt64/int64(time.Microsecond) { // overflowed, or past a Duration
		return math.MaxInt64
	}
	return time.Duration(now-us.Int64) * time.Microsecond
}

// Default and largest page of ListMessages.
const (
	defaultListLimit = 100
	maxListLimit     = 10000
)

// ListMessages pages through outbox rows in id order.
func (d *Driver) ListMessages(ctx context.Context, f driver.ListFilter) ([]driver.Job, error) {
	now, err := d.now(ctx)
	if err != nil {
		return nil, err
	}
	var where []string
	args := []any{now} // ?1, read by listCols
	switch f.State {
	case "":
	case driver.StateInDoubt:
		where = append(where, doubtCond)
	case driver.StatePending:
		where = append(where, "state = 'pending' AND NOT "+doubtCond)
	default:
		where = append(where, "state = ?")
		args = append(args, string(f.State))
	}
	if len(f.Types) > 0 {
		where = append(where, "type IN ("+marks(len(f.Types))+")")
		for _, t := range f.Types {
			args = append(args, t)
		}
	}
	if len(f.IDs) > 0 {
		where = append(where, "id IN (SELECT value FROM json_each(?))")
		args = append(args, int64sJSON(f.IDs))
	}
	if f.AfterID > 0 {
		where = append(where, "id > ?")
		args = append(args, f.AfterID)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	limit = min(limit, maxListLimit)
	q := "SELECT " + d.q.listCols + " FROM " + d.prefix + "outbox"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY id LIMIT ?"
	args = append(args, limit)
	rows, err := d.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, wrap("list messages", err)
	}
	return scanJobs(rows, true)
}

func int64sJSON(ids []int64) string {
	b, _ := json.Marshal(ids) // integers always marshal
	return string(b)
}

// Revive moves dead rows back to pending with a fresh attempt count, or
// deletes them. It selects by IDs, or by Types when IDs is empty (both
// narrow the set when both are given); with neither it changes nothing.
func (d *Driver) Revive(ctx context.Context, p driver.ReviveParams) (int, error) {
	if len(p.IDs) == 0 && len(p.Types) == 0 {
		return 0, nil
	}
	where := "state = 'dead'"
	var args []any
	if len(p.IDs) > 0 {
		where += " AND id IN (SELECT value FROM json_each(?))"
		args = append(args, int64sJSON(p.IDs))
	}
	if len(p.Types) > 0 {
		where += " AND type IN (SELECT value FROM json_each(?))"
		args = append(args, stringsJSON(p.Types))
	}
	// A row an at-most-once attempt marked stays dead unless its mark is
	// cleared with it: pending and marked it would read as in doubt and
	// never be sent (ADR 0015).
	retryWhere := where
	if !p.ClearMark {
		retryWhere += " AND attempted_at IS NULL"
	}
	o := d.prefix + "outbox"
	var n int64
	err := d.write(ctx, func(w writer, now int64) error {
		var res sql.Result
		var err error
		if p.Discard {
			res, err = w.ExecContext(ctx, "DELETE FROM "+o+" WHERE "+where, args...)
		} else {
			// The count restarts so the relay's attempt limit applies
			// afresh; last_error stays as the reason it had died.
			res, err = w.ExecContext(ctx, "UPDATE "+o+" SET state = 'pending', attempts = 0, available_at = ?, lease_token = NULL, lease_until = NULL, attempted_at = NULL WHERE "+retryWhere,
				append([]any{now}, args...)...)
		}
		if err != nil {
			return wrap("revive", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return int(n), err
}

func stringsJSON(s []string) string {
	b, _ := json.Marshal(s) // strings always marshal
	return string(b)
}
