// Package m2mwire holds the encodings every transport of mensageria
// shares (m2mhttp's envelope, the Kafka record's and the NATS message's
// headers), so that a message reads back the same whichever way it
// travelled. It is public, and versioned with the core module, because the
// Kafka and NATS transports are modules of their own: a transport written
// outside this repository can use it to read and write the same times.
package m2mwire

import (
	"fmt"
	"time"
)

// AppendTime appends t as RFC 3339 in UTC with nanoseconds.
func AppendTime(b []byte, t time.Time) []byte { return t.UTC().AppendFormat(b, time.RFC3339Nano) }

// ParseTime reads an RFC 3339 time into UTC. Times whose UTC year falls
// outside 1..9999 are refused: RFC 3339 could not carry them on (a
// "0000-01-01T00:00:00+01:00" is in year -1 in UTC).
func ParseTime(v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("must be an RFC 3339 date-time: %q", v)
	}
	t = t.UTC()
	if y := t.Year(); y < 1 || y > 9999 {
		return time.Time{}, fmt.Errorf("%q is out of range: years 1 to 9999 in UTC", v)
	}
	return t, nil
}
