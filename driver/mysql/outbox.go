package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

// queries holds the statements whose table names depend on the prefix.
type queries struct {
	named
	insertHead string
}

func newQueries(p string) queries {
	return queries{
		named:      loadNamed(p),
		insertHead: "INSERT INTO " + p + "outbox (message_id, type, `key`, payload, headers) VALUES ",
	}
}

// jobCols are the columns scanJobs reads, a row in doubt at now read as
// driver.StateInDoubt. now is the driver's own integer, written into the
// statement.
func jobCols(now int64) string {
	return "id, message_id, type, `key`, payload, headers, CASE WHEN " + doubtCond(now) + " THEN 'in_doubt' ELSE state END, attempts, created_at, available_at, delivered_at, last_error, last_route, attempted_at"
}

// doubtCond is true of a row in doubt at now: pending, marked by an
// at-most-once attempt (queries/mark.sql), not under a live lease.
// schedCond is true of a scheduled row: pending, not due yet at now, never
// attempted and no error recorded (a retry's backoff records one). A claim
// counts an attempt, so a leased row, whose available_at the claim sets to
// its lease's end, is never one. Never NULL, so that NOT of it is true of
// every other row.
func schedCond(now int64) string {
	n := strconv.FormatInt(now, 10)
	return "COALESCE(state = 'pending' AND attempted_at IS NULL AND available_at > " + n + " AND attempts = 0 AND last_error IS NULL, 0)"
}

// scheduledInsert is the INSERT of rows that also sets available_at: the
// later of each row's NotBefore (0 for none) and the database clock, so a
// NotBefore in the past is due at once, as a row without one is.
func (d *Driver) scheduledInsert(n int) string {
	head := strings.Replace(d.q.insertHead, "headers)", "headers, available_at)", 1)
	return head + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, GREATEST(?, "+nowExpr+")), ", n), ", ")
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

var _ driver.DueReporter = (*Driver)(nil)

// NextDue reports how long until the earliest pending row of types that is
// not due yet comes due, on the database clock: a scheduled row or one
// waiting for a retry. A leased row and a row in doubt are left out; each
// type's range of the claim index is read from now on.
func (d *Driver) NextDue(ctx context.Context, types []string) (time.Duration, bool, error) {
	if len(types) == 0 {
		return 0, false, nil
	}
	now, err := d.now(ctx)
	if err != nil {
		return 0, false, err
	}
	n := strconv.FormatInt(now, 10)
	var next sql.NullInt64
	q := "SELECT MIN(available_at) FROM " + d.prefix + "outbox WHERE state = 'pending' AND type IN (?" + strings.Repeat(", ?", len(types)-1) + ") AND available_at > " + n +
		" AND attempted_at IS NULL AND (lease_until IS NULL OR lease_until <= " + n + ")"
	args := make([]any, len(types))
	for i, t := range types {
		args[i] = t
	}
	if err := d.db.QueryRowContext(ctx, q, args...).Scan(&next); err != nil {
		return 0, false, wrap("next due", err)
	}
	if !next.Valid {
		return 0, false, nil
	}
	return time.Duration(next.Int64-now) * time.Microsecond, true, nil
}

func doubtCond(now int64) string {
	n := strconv.FormatInt(now, 10)
	return "(state = 'pending' AND attempted_at IS NOT NULL AND (lease_until IS NULL OR lease_until <= " + n + "))"
}

// settledGuard: still leased to the token (first argument) and the lease
// not expired at now (second).
const settledGuard = " AND state = 'pending' AND lease_token = ? AND lease_until > ?"

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
// catalog lacks, read in the same transaction.
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
	types = dedupe(types)
	owned := map[string]bool{}
	q, args := inList("SELECT name FROM "+d.prefix+"owners WHERE kind = 'type' AND name IN ", types)
	rs, qerr := w.QueryContext(ctx, q, args...)
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
	if err := inSavepoint(ctx, stx, "mensageria_enqueue", func() error { return d.insertRows(ctx, stx, p.Rows) }); err != nil {
		return err
	}
	if p.Notify {
		d.notify()
	}
	return nil
}

// inSavepoint runs fn inside a savepoint of stx, rolled back to when fn
// fails.
func inSavepoint(ctx context.Context, stx *sql.Tx, name string, fn func() error) error {
	if _, err := stx.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return wrap("savepoint", err)
	}
	if err := fn(); err != nil {
		bg := context.WithoutCancel(ctx)
		_, _ = stx.ExecContext(bg, "ROLLBACK TO SAVEPOINT "+name)
		_, _ = stx.ExecContext(bg, "RELEASE SAVEPOINT "+name)
		return err
	}
	_, err := stx.ExecContext(ctx, "RELEASE SAVEPOINT "+name)
	return wrap("savepoint", err)
}

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
		q := d.q.insertHead + strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", n), ", ")
		if (&driver.InsertParams{Rows: rows[:n]}).Scheduled() {
			q, args = d.scheduledInsert(n), scheduledArgs(rows[:n], args)
		}
		if _, err := w.ExecContext(ctx, q, args...); err != nil {
			return d.refusal(ctx, w, rows[:n], err)
		}
		rows = rows[n:]
	}
	return nil
}

// perTypeLimit is how many types a claim scans one by one, each on its own
// index range; beyond it one IN-list scan is used.
const perTypeLimit = 64

// fenced reports whether the app's election still gives p.Fence's epoch a
// holder, reading the lease row with a shared lock: a new leader's epoch
// waits for this claim to commit, so no claim of a deposed leader commits
// after its successor took over.
func (d *Driver) fenced(ctx context.Context, w writer, f *driver.Fence) (bool, error) {
	if f == nil {
		return true, nil
	}
	var epoch int64
	var holder string
	err := w.QueryRowContext(ctx, "SELECT epoch, holder FROM "+d.prefix+"leader WHERE app = ? LOCK IN SHARE MODE", f.App).Scan(&epoch, &holder)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, wrap("claim fence", err)
	}
	return epoch == f.Epoch && holder != "", nil
}

// Claim leases due rows of p.Types in one transaction: each type's due rows
// are locked with FOR UPDATE SKIP LOCKED on its own index range, so
// concurrent claimers take different rows and a backlog of other types
// costs nothing.
func (d *Driver) Claim(ctx context.Context, p driver.ClaimParams) ([]driver.Job, error) {
	types := dedupe(p.Types)
	if len(types) == 0 || p.Limit <= 0 {
		return nil, nil
	}
	if p.Lease <= 0 {
		return nil, fmt.Errorf("mensageria/mysql: claim: lease must be positive, got %s", p.Lease)
	}
	ordered := map[string]bool{}
	for _, t := range p.OrderedTypes {
		ordered[t] = true
	}
	var jobs []driver.Job
	err := d.write(ctx, func(w writer, now int64) error {
		jobs = nil
		if ok, err := d.fenced(ctx, w, p.Fence); !ok || err != nil {
			return err
		}
		ids, err := d.due(ctx, w, p.Limit, types, ordered, now)
		if err != nil || len(ids) == 0 {
			return err
		}
		until := now + p.Lease.Microseconds()
		// The attempts a plain INSERT gave a row count from 0 to
		// 1,000,000,000, so "+ 1" never overflows.
		q, args := inList("UPDATE "+d.prefix+"outbox"+" SET lease_token = ?, lease_until = ?, available_at = ?, attempts = LEAST(GREATEST(attempts, 0), 1000000000) + 1 WHERE id IN ", ids, p.Token, until, until)
		if _, err := w.ExecContext(ctx, q, args...); err != nil {
			return wrap("claim", err)
		}
		jobs, err = d.jobsByID(ctx, w, ids, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

// due locks and returns, oldest first, up to limit due pending rows of
// types not marked by an at-most-once attempt; an ordered type's only at
// the head of its key.
func (d *Driver) due(ctx context.Context, w writer, limit int, types []string, ordered map[string]bool, now int64) ([]int64, error) {
	o := d.prefix + "outbox"
	// The oldest unsettled row of its key: no pending row of the same
	// (type, key) with a smaller id, whether leased, waiting to retry or
	// due. The subquery is a plain read: FOR UPDATE locks the outer rows
	// only.
	headOfKey := " AND NOT EXISTS (SELECT 1 FROM " + o + " b WHERE b.type = o.type AND b.`key` = o.`key` AND b.state = 'pending' AND b.id < o.id)"
	type cand struct{ at, id int64 }
	var cands []cand
	scan := func(q string, args ...any) error {
		rows, err := w.QueryContext(ctx, q, args...)
		if err != nil {
			return wrap("claim", err)
		}
		defer rows.Close()
		for rows.Next() {
			var c cand
			if err := rows.Scan(&c.id, &c.at); err != nil {
				return wrap("claim", err)
			}
			cands = append(cands, c)
		}
		return wrap("claim", rows.Err())
	}
	base := "SELECT o.id, o.available_at FROM " + o + " o WHERE o.state = 'pending' AND o.available_at <= ? AND o.attempted_at IS NULL AND "
	tail := " ORDER BY o.available_at, o.id LIMIT ? FOR UPDATE SKIP LOCKED"
	if len(types) <= perTypeLimit {
		for _, t := range types {
			q := base + "o.type = ?"
			if ordered[t] {
				q += headOfKey
			}
			if err := scan(q+tail, now, t, limit); err != nil {
				return nil, err
			}
		}
	} else {
		var plain, ord []string
		for _, t := range types {
			if ordered[t] {
				ord = append(ord, t)
			} else {
				plain = append(plain, t)
			}
		}
		args := []any{now}
		for _, t := range plain {
			args = append(args, t)
		}
		for _, t := range ord {
			args = append(args, t)
		}
		args = append(args, limit)
		if err := scan(base+"(o.type IN ("+marks(len(plain))+") OR (o.type IN ("+marks(len(ord))+")"+headOfKey+"))"+tail, args...); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	// The rows locked beyond limit stay locked, untouched, until the
	// commit a few statements later.
	ids := make([]int64, 0, min(len(cands), limit))
	for _, c := range cands[:min(len(cands), limit)] {
		ids = append(ids, c.id)
	}
	return ids, nil
}

// jobsByID reads the rows of ids in id order.
func (d *Driver) jobsByID(ctx context.Context, w writer, ids []int64, now int64) ([]driver.Job, error) {
	q, args := inList("SELECT "+jobCols(now)+" FROM "+d.prefix+"outbox"+" WHERE id IN ", ids)
	rows, err := w.QueryContext(ctx, q+" ORDER BY id", args...)
	if err != nil {
		return nil, wrap("claim", err)
	}
	return scanJobs(rows, false)
}

// marks returns n comma-separated placeholders; with n == 0 it returns a
// NULL, which matches nothing.
func marks(n int) string {
	if n == 0 {
		return "NULL"
	}
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// inList appends "(?, ?, …)" for vals to head, after the args given.
func inList[T any](head string, vals []T, before ...any) (string, []any) {
	args := append([]any{}, before...)
	for _, v := range vals {
		args = append(args, v)
	}
	return head + "(" + marks(len(vals)) + ")", args
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

// scanJobs reads rows of jobCols, and the type's owner when withOwner.
// The columns a plain INSERT could have filled with what the driver cannot
// read are read apart: such a row comes back with driver.Job.Unreadable
// naming them, for the relay to park, never as an error that fails every
// other row of the claim or the listing.
func scanJobs(rows *sql.Rows, withOwner bool) ([]driver.Job, error) {
	defer rows.Close()
	var jobs []driver.Job
	for rows.Next() {
		var (
			j                   driver.Job
			state, mid          string
			lastErr, lastRoute  sql.NullString
			owner               sql.NullString
			payload, headers    []byte
			attempts            int64
			created, available  int64
			delivered, attempAt sql.NullInt64
		)
		dest := []any{&j.ID, &mid, &j.Type, &j.Key, &payload, &headers, &state, &attempts, &created, &available, &delivered, &lastErr, &lastRoute, &attempAt}
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
		if delivered.Valid {
			t := r.time("delivered_at", delivered.Int64)
			j.DeliveredAt = &t
		}
		if attempAt.Valid {
			t := r.time("attempted_at", attempAt.Int64)
			j.AttemptedAt = &t
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("reading outbox rows", err)
	}
	return jobs, nil
}

// rowReader reads the columns of one row, naming in *why each one that
// holds something the driver cannot carry.
type rowReader struct{ why *string }

func (r rowReader) bad(column, what string) {
	*r.why = driver.UnreadableColumn(*r.why, column, what)
}

func shown(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return strconv.Quote(s)
}

func (r rowReader) uuid(column, v string) [16]byte {
	if id, err := uuid.Parse(v); err == nil && len(v) == 36 {
		return id
	}
	r.bad(column, "is not a UUID ("+shown(v)+")")
	return [16]byte{}
}

// json is a JSON text (NULL, a nil slice, allowed when nullable).
func (r rowReader) json(column string, v []byte, nullable bool) []byte {
	if v == nil && nullable {
		return nil
	}
	if json.Valid(v) {
		return v
	}
	r.bad(column, "is not JSON text ("+shown(string(v))+")")
	return nil
}

func (r rowReader) integer(column string, v, lo, hi int64) int64 {
	if v >= lo && v <= hi {
		return v
	}
	r.bad(column, "is not an integer from "+fmt.Sprint(lo)+" to "+fmt.Sprint(hi)+" ("+fmt.Sprint(v)+")")
	return 0
}

// time reads unix microseconds in years 1 to 9999 UTC: RFC 3339 and JSON,
// which every transport, listing and console writes times in, hold no
// other.
func (r rowReader) time(column string, v int64) time.Time {
	t := fromMicros(v)
	if y := t.Year(); y < 1 || y > 9999 {
		r.bad(column, "is out of range ("+fmt.Sprint(v)+" µs): years 1 to 9999 in UTC")
		return time.Time{}
	}
	return t
}

// Settle records the outcomes of one claimed batch in one transaction;
// each change locks its rows still leased to the token under a live lease
// and changes those only. The rows it did not change are sorted by one
// more read: gone or leased to another token is Fenced, still ours but
// past the lease is Expired.
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

// change locks the rows of ids still leased to the token under a live
// lease and runs head (an UPDATE … SET …, with setArgs, or a DELETE FROM)
// on them; MySQL has no UPDATE … RETURNING, so the lock tells which rows
// take the outcome.
func (st *settlement) change(head string, setArgs []any, ids []int64, count bool) error {
	for len(ids) > 0 {
		n := min(len(ids), chunk)
		q, args := inList("SELECT id, type FROM "+st.d.prefix+"outbox"+" WHERE id IN ", ids[:n])
		rows, err := st.w.QueryContext(st.ctx, q+settledGuard+" FOR UPDATE", append(args, st.p.Token, st.now)...)
		if err != nil {
			return wrap("settle", err)
		}
		var found []int64
		for rows.Next() {
			var id int64
			var typ string
			if err := rows.Scan(&id, &typ); err != nil {
				rows.Close()
				return wrap("settle", err)
			}
			found = append(found, id)
			st.settled[id] = true
			if count {
				st.counts[typ]++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return wrap("settle", err)
		}
		if len(found) > 0 {
			q, args := inList(head+" WHERE id IN ", found, setArgs...)
			if _, err := st.w.ExecContext(st.ctx, q, args...); err != nil {
				return wrap("settle", err)
			}
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
		if err := st.change("UPDATE "+o+" SET state = 'delivered', delivered_at = ?, lease_token = NULL, lease_until = NULL", []any{now}, st.p.Delivered, true); err != nil {
			return err
		}
	} else if err := st.change("DELETE FROM "+o, nil, st.p.Delivered, true); err != nil {
		return err
	}
	return wrap("settle counts", st.d.countDelivered(st.ctx, st.w, st.counts, now))
}

// countDelivered adds the rows delivered at now, per type, to the minute's
// counts.
func (d *Driver) countDelivered(ctx context.Context, w writer, perType map[string]int64, now int64) error {
	minute := now - now%time.Minute.Microseconds()
	for _, typ := range slices.Sorted(mapKeys(perType)) { // one lock order
		if _, err := w.ExecContext(ctx, "INSERT INTO "+d.prefix+"delivered_counts (type, minute, n) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE n = n + VALUES(n)",
			typ, minute, perType[typ]); err != nil {
			return err
		}
	}
	return nil
}

func mapKeys[V any](m map[string]V) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// released gives a released row its attempt back: it was not attempted.
// A release also clears an at-most-once mark: the relay releases only
// rows it did not send.
func (st *settlement) released() error {
	return st.change("UPDATE "+st.d.prefix+"outbox"+" SET attempts = GREATEST(attempts - 1, 0), available_at = ?, attempted_at = NULL, lease_token = NULL, lease_until = NULL", []any{st.now}, st.p.Release, false)
}

// failed records the retries, the dead and the rows left in doubt. An
// empty route is stored as none, so a row never shows the route of an
// older attempt next to a newer error.
func (st *settlement) failed() error {
	o, now, p := st.d.prefix+"outbox", st.now, st.p
	for _, r := range p.Retry {
		delay := max(r.Delay, 0)
		back := 0
		if r.Uncounted {
			back = 1 // failed on its destination, not on its own
		}
		// A retry says the request never reached the receiver, so an
		// at-most-once mark is cleared.
		if err := st.change("UPDATE "+o+" SET available_at = ?, attempts = GREATEST(attempts - ?, 0), attempted_at = NULL, last_error = ?, last_route = NULLIF(?, ''), lease_token = NULL, lease_until = NULL",
			[]any{now + delay.Microseconds(), back, r.Error, r.Route}, []int64{r.ID}, false); err != nil {
			return err
		}
	}
	for _, f := range p.Dead {
		if err := st.change("UPDATE "+o+" SET state = 'dead', available_at = ?, last_error = ?, last_route = NULLIF(?, ''), lease_token = NULL, lease_until = NULL",
			[]any{now, f.Error, f.Route}, []int64{f.ID}, false); err != nil {
			return err
		}
	}
	// Left in doubt: the lease given up, the mark kept (set now when there
	// was none), and a probe may take the row after ProbeAfter.
	for _, f := range p.InDoubt {
		if err := st.change("UPDATE "+o+" SET attempted_at = COALESCE(attempted_at, ?), available_at = ?, last_error = ?, last_route = NULLIF(?, ''), lease_token = NULL, lease_until = NULL",
			[]any{now, now + max(f.ProbeAfter, 0).Microseconds(), f.Error, f.Route}, []int64{f.ID}, false); err != nil {
			return err
		}
	}
	return nil
}

// sort tells the rows this settlement changed from those it could not:
// still ours but past the lease (Expired), or gone or leased to another
// token (Fenced).
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
	q, args := inList("SELECT id FROM "+st.d.prefix+"outbox"+" WHERE id IN ", rest)
	rows, err := st.w.QueryContext(st.ctx, q+" AND state = 'pending' AND lease_token = ? AND lease_until <= ?", append(args, st.p.Token, st.now)...)
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

// Stats reports every type with pending or dead rows or deliveries in the
// last hour (see drivertest for what each count holds). Owner is the
// type's app in the catalog ("" for none, or unclaimed).
func (d *Driver) Stats(ctx context.Context) ([]driver.TypeStats, error) {
	now, err := d.now(ctx)
	if err != nil {
		return nil, err
	}
	n := strconv.FormatInt(now, 10)
	// Only pending and dead rows are read; kept delivered rows may be many
	// and are counted in delivered_counts. A row in doubt counts in the
	// in-doubt column only, with the age of its mark.
	rows, err := d.db.QueryContext(ctx, `SELECT type,
		COALESCE(SUM(state = 'pending' AND attempted_at IS NULL AND (lease_until IS NULL OR lease_until <= `+n+`) AND NOT `+schedCond(now)+`), 0),
		COALESCE(SUM(state = 'pending' AND lease_until > `+n+`), 0),
		COALESCE(SUM(state = 'dead'), 0),
		0,
		MIN(CASE WHEN state = 'pending' AND (attempted_at IS NULL OR lease_until > `+n+`) AND NOT `+schedCond(now)+` THEN created_at END),
		COALESCE(SUM(`+doubtCond(now)+`), 0),
		MIN(CASE WHEN `+doubtCond(now)+` THEN attempted_at END),
		COALESCE(SUM(`+schedCond(now)+`), 0)
		FROM `+d.prefix+"outbox"+` WHERE state IN ('pending', 'dead') GROUP BY type
		UNION ALL
		SELECT type, 0, 0, 0, SUM(n), NULL, 0, NULL, 0 FROM `+d.prefix+`delivered_counts WHERE minute > ? GROUP BY type`,
		now-time.Hour.Microseconds())
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

// ageOf is the age at now of a time in unix microseconds: none for a NULL
// or a time in the future, at most the longest Duration.
func ageOf(us sql.NullInt64, now int64) time.Duration {
	if !us.Valid || us.Int64 >= now {
		return 0
	}
	if now-us.Int64 <= 0 || now-us.Int64 > math.MaxInt64/int64(time.Microsecond) {
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
	var args []any
	switch f.State {
	case "":
	case driver.StateInDoubt:
		where = append(where, doubtCond(now))
	case driver.StatePending:
		where = append(where, "state = 'pending' AND NOT "+doubtCond(now))
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
		where = append(where, "id IN ("+marks(len(f.IDs))+")")
		for _, id := range f.IDs {
			args = append(args, id)
		}
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
	q := "SELECT " + jobCols(now) + ", (SELECT w.app FROM " + d.prefix + "owners w WHERE w.kind = 'type' AND w.name = " + d.prefix + "outbox" + ".type) FROM " + d.prefix + "outbox"
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
		where += " AND id IN (" + marks(len(p.IDs)) + ")"
		for _, id := range p.IDs {
			args = append(args, id)
		}
	}
	if len(p.Types) > 0 {
		where += " AND type IN (" + marks(len(p.Types)) + ")"
		for _, t := range p.Types {
			args = append(args, t)
		}
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
