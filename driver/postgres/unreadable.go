package postgres

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/xadm/mensageria/driver"
)

// rowTimes reads the timestamps of one outbox row without failing the
// statement's other rows: a timestamptz holds 'infinity' and '-infinity',
// which no time.Time can, and years RFC 3339 cannot write; a plain INSERT
// of a version before 12 could store any of them (migration 012 refuses
// them now). Each column that cannot
// be read is named in why (driver.Job.Unreadable) and left zero.
type rowTimes struct {
	created, available, delivered, attempted pgtype.Timestamptz
}

// readTime is the time of ts, or the zero time with column named in *why
// when it is infinite or outside years 1 to 9999 UTC. A NULL is the zero time and no reason: the callers know which
// columns may be NULL.
func readTime(ts pgtype.Timestamptz, column string, why *string) time.Time {
	if !ts.Valid {
		return time.Time{}
	}
	switch ts.InfinityModifier {
	case pgtype.Infinity:
		*why = driver.UnreadableColumn(*why, column, "is infinity")
		return time.Time{}
	case pgtype.NegativeInfinity:
		*why = driver.UnreadableColumn(*why, column, "is -infinity")
		return time.Time{}
	}
	if y := ts.Time.UTC().Year(); y < 1 || y > 9999 {
		// Go holds it, but RFC 3339 and JSON, which every transport,
		// listing and console writes times in, do not.
		*why = driver.UnreadableColumn(*why, column, outOfRange(ts.Time))
		return time.Time{}
	}
	return ts.Time
}

// outOfRange is the reason for a time outside years 1 to 9999 UTC.
func outOfRange(t time.Time) string {
	return "is out of range (" + t.UTC().Format(time.RFC3339Nano) + "): years 1 to 9999 in UTC"
}

// optional is readTime for a nullable column.
func optionalTime(ts pgtype.Timestamptz, column string, why *string) *time.Time {
	if !ts.Valid {
		return nil
	}
	t := readTime(ts, column, why)
	return &t
}

// into sets j's times, naming in j.Unreadable each it could not read.
func (rt *rowTimes) into(j *driver.Job) {
	j.CreatedAt = readTime(rt.created, "created_at", &j.Unreadable)
	j.AvailableAt = readTime(rt.available, "available_at", &j.Unreadable)
	j.DeliveredAt = optionalTime(rt.delivered, "delivered_at", &j.Unreadable)
	j.AttemptedAt = optionalTime(rt.attempted, "attempted_at", &j.Unreadable)
}
