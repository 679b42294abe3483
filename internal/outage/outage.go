// Package outage follows a broker destination's health from the answers
// its Sender gets, so that an outage is logged once when it starts and once
// when it ends, not once per message. The Kafka and NATS Senders share it.
package outage

import (
	"log/slog"
	"sync"
	"time"
)

// Log follows the destinations of one Sender. The zero value is not
// usable; use New.
type Log struct {
	log  *slog.Logger
	mu   sync.Mutex
	down map[string]*state
}

type state struct {
	since    time.Time
	first    error
	failures int64
}

// New returns a Log writing to log.
func New(log *slog.Logger) *Log {
	return &Log{log: log, down: map[string]*state{}}
}

// Failed records n deliveries to dest that failed on the destination's
// side (what mensageria.Unavailable marks); n is 0 for a failure that
// concerned no delivery (a check at start). The first failure of an outage
// is logged, at warning level, with the error; the rest are counted.
func (l *Log) Failed(dest string, n int, err error) {
	n = max(n, 0)
	l.mu.Lock()
	defer l.mu.Unlock()
	if st, ok := l.down[dest]; ok {
		st.failures += int64(n)
		return
	}
	l.down[dest] = &state{since: time.Now(), first: err, failures: int64(n)}
	l.log.Warn(dest+" is unavailable; its messages stay in the outbox and are retried, and this is logged again when it answers",
		"destination", dest, "err", err)
}

// Succeeded records that dest took deliveries again: an outage in progress
// ends, and its end is logged with how long it lasted and what failed
// meanwhile.
func (l *Log) Succeeded(dest string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.down[dest]
	if !ok {
		return
	}
	delete(l.down, dest)
	l.log.Info(dest+" is available again",
		"destination", dest, "down_for", time.Since(st.since).Round(time.Millisecond),
		"failed_deliveries", st.failures, "first_err", st.first)
}

// Down reports whether an outage of dest is in progress, since when, and
// the error it started with.
func (l *Log) Down(dest string) (since time.Time, first error, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st, ok := l.down[dest]
	if !ok {
		return time.Time{}, nil, false
	}
	return st.since, st.first, true
}
