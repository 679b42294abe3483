package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

// scanJobs reads rows of jobCols, and the type's owner after them when
// withOwner (ListMessages). SQLite stores what an INSERT gives whatever a
// column's type, so the columns a plain INSERT could have filled with what
// the driver cannot read are read apart (rowReader): such a row comes back
// with driver.Job.Unreadable naming them, for the relay to park, never as
// an error that fails every other row of the claim or the listing.
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
