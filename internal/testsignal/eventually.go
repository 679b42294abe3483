package testsignal

import (
	"fmt"
	"time"
)

// Eventually polls cond until it holds, failing tb once timeout passes
// (DefaultTimeout when timeout is 0). It is for a state that no signal
// reports, such as a row a relay of another process wrote or a span an
// exporter received: a test waits for the state itself, never for a fixed
// time. msgAndArgs say what was awaited: a string, or a format and its
// arguments; an argument that is a func() string is called when the wait
// fails, so the message shows the last thing the poll saw.
//
// The poll starts at a millisecond and doubles up to 50 ms, so a state
// reached at once costs nothing and a slow one does not spin.
func Eventually(tb TB, timeout time.Duration, cond func() bool, msgAndArgs ...any) {
	tb.Helper()
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("testsignal: not within %s: %s", timeout, describe(msgAndArgs))
			return
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}

// Receive returns the next value of ch, failing tb after DefaultTimeout:
// WaitOrTimeout for a channel a test made itself.
func Receive[T any](tb TB, ch <-chan T) T {
	tb.Helper()
	t := time.NewTimer(DefaultTimeout)
	defer t.Stop()
	select {
	case v := <-ch:
		return v
	case <-t.C:
		var zero T
		tb.Fatalf("testsignal: no %T received within %s", zero, DefaultTimeout)
		return zero
	}
}

func describe(msgAndArgs []any) string {
	msgAndArgs = append([]any(nil), msgAndArgs...)
	for i, a := range msgAndArgs {
		if f, ok := a.(func() string); ok {
			msgAndArgs[i] = f()
		}
	}
	switch {
	case len(msgAndArgs) == 0:
		return "the condition"
	case len(msgAndArgs) == 1:
		return fmt.Sprint(msgAndArgs[0])
	}
	if format, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(format, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}
