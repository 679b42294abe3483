package mysql

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

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
