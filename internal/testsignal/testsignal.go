// Package testsignal lets tests wait for what a long-running part of the
// relay did (an election round, a claim, a settle, a purge) instead of
// sleeping and hoping it happened. A Signal is off, its zero value, in
// production: sending on it costs a nil check. Tests turn a Client's
// signals on before Start (ForClient) and wait on them with a deadline.
//
// It imports neither the root package nor testing, so the relay can hold
// its signals and a production binary does not link the testing package.
package testsignal

import (
	"time"

	"github.com/xadm/mensageria/driver"
)

// DefaultTimeout bounds WaitOrTimeout: generous, since only a broken part
// never signals, and a loaded machine must not fail a healthy one.
const DefaultTimeout = 10 * time.Second

// capacity is how many unread values a signal keeps; later ones are
// dropped rather than block the part that sends them.
const capacity = 1000

// Signal carries values from one part of the relay to a waiting test.
type Signal[T any] struct {
	ch chan T
}

// Init turns the signal on.
func (s *Signal[T]) Init() { s.ch = make(chan T, capacity) }

// Signal records v if the signal is on. It never blocks: a test that
// stops reading loses the newest values, not the relay's progress.
func (s Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// TB is the part of testing.TB a wait needs to fail a test.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// WaitOrTimeout returns the next value, failing tb after DefaultTimeout.
func (s Signal[T]) WaitOrTimeout(tb TB) T {
	tb.Helper()
	v, ok := s.Wait(DefaultTimeout)
	if !ok {
		var zero T
		tb.Fatalf("testsignal: no %T signal within %s", zero, DefaultTimeout)
	}
	return v
}

// Wait returns the next value, or false once d passes without one (or at
// once when the signal is off).
func (s Signal[T]) Wait(d time.Duration) (T, bool) {
	var zero T
	if s.ch == nil {
		return zero, false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-s.ch:
		return v, true
	case <-t.C:
		return zero, false
	}
}

// Drain discards the values not read yet, so the next wait is for
// something that happens after it.
func (s Signal[T]) Drain() {
	for {
		select {
		case <-s.ch:
		default:
			return
		}
	}
}

// Claim is what one claim of the relay's claiming part returned.
type Claim struct {
	Rows int
	Err  error
}

// Relay holds the signals of one relay's parts, each named after what it
// reports.
type Relay struct {
	// Elected: leadership finished an election round; whether it leads.
	Elected Signal[bool]
	// Claimed: claiming made a claim, from the main loop or a route's own.
	Claimed Signal[Claim]
	// Delivered: delivering sent a claimed batch; how many rows it held.
	Delivered Signal[int]
	// Settled: settling recorded a batch's outcomes (nil), or gave up
	// after retrying while the lease lasted.
	Settled Signal[error]
	// Purged: maintenance ran one purge statement.
	Purged Signal[driver.PurgeResult]
}

// Init turns every signal of r on.
func (r *Relay) Init() {
	r.Elected.Init()
	r.Claimed.Init()
	r.Delivered.Init()
	r.Settled.Init()
	r.Purged.Init()
}

// ForClient turns on the signals of the relay the given *mensageria.Client
// starts next, and returns them; call it before Start. The root package
// sets it: tests of other packages (mensageriatest) reach the relay's
// signals this way without the Client exporting them to adopters.
var ForClient func(client any) *Relay
