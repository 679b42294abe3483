package mensageriatest

import (
	"time"

	"github.com/xadm/mensageria/internal/testsignal"
)

// TB is the part of testing.TB that Eventually needs: a *testing.T, a
// *testing.B, or a property-test runner's T.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Eventually polls cond until it holds, failing tb once within has passed
// (10 s when within is 0). It is for a state no hook or signal reports: a
// row a relay of another process wrote, a message a broker holds, an
// effect a receiver applied. A test waits for the state itself, never for
// a fixed time. msgAndArgs say what was awaited: a string, or a format and
// its arguments; an argument that is a func() string is called when the
// wait fails, so the message shows the last thing the poll saw.
//
// The poll starts at a millisecond and doubles up to 50 ms, so a state
// reached at once costs nothing and a slow one does not spin.
func Eventually(tb TB, within time.Duration, cond func() bool, msgAndArgs ...any) {
	tb.Helper()
	testsignal.Eventually(tb, within, cond, msgAndArgs...)
}
