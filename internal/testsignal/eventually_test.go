package testsignal

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTB records a failure instead of ending the test.
type fakeTB struct{ failed string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestEventuallyReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			n.Add(1)
		}
	}()
	tb := &fakeTB{}
	Eventually(tb, time.Second, func() bool { return n.Load() == 3 }, "three increments")
	if tb.failed != "" {
		t.Fatalf("failed although the condition held: %s", tb.failed)
	}
}

func TestEventuallyFailsWithItsMessageAfterTheTimeout(t *testing.T) {
	tb := &fakeTB{}
	start := time.Now()
	Eventually(tb, 30*time.Millisecond, func() bool { return false }, "row %d delivered", 7)
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Fatalf("gave up after %s, before its timeout", took)
	}
	if !strings.Contains(tb.failed, "row 7 delivered") || !strings.Contains(tb.failed, "30ms") {
		t.Fatalf("failure %q; want the timeout and the formatted message", tb.failed)
	}
}

// A func() string argument is read when the wait fails: the message shows
// the last state the poll saw, not the one when the wait began.
func TestEventuallyReadsAFuncArgumentWhenItFails(t *testing.T) {
	tb := &fakeTB{}
	last := "nothing yet"
	Eventually(tb, 20*time.Millisecond, func() bool { last = "503"; return false }, "ready, last %s", func() string { return last })
	if !strings.Contains(tb.failed, "ready, last 503") {
		t.Fatalf("failure %q; want the state the poll saw last", tb.failed)
	}
}

func TestReceiveReturnsTheValueSent(t *testing.T) {
	ch := make(chan int, 1)
	ch <- 42
	tb := &fakeTB{}
	if v := Receive(tb, ch); v != 42 || tb.failed != "" {
		t.Fatalf("Receive = %d (failure %q); want 42", v, tb.failed)
	}
}
