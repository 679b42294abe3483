package receive

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeTimers stands in for time.AfterFunc: the test fires the timers.
type fakeTimers struct {
	mu     sync.Mutex
	funcs  []func()
	active []bool
}

func (f *fakeTimers) after(_ time.Duration, fn func()) func() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := len(f.funcs)
	f.funcs = append(f.funcs, fn)
	f.active = append(f.active, true)
	return func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		was := f.active[i]
		f.active[i] = false
		return was
	}
}

// fire runs every active timer once.
func (f *fakeTimers) fire() {
	f.mu.Lock()
	var due []func()
	for i, fn := range f.funcs {
		if f.active[i] {
			f.active[i] = false
			due = append(due, fn)
		}
	}
	f.mu.Unlock()
	for _, fn := range due {
		fn()
	}
}

// The notifier sends the first mark at once, folds the marks of an
// interval into one at its end, goes quiet after an interval without
// marks, keeps consumers apart, and sends what is marked when it closes.
func TestNotifierCoalesces(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	got := make(chan struct{}, 100)
	n := newNotifier(time.Hour, func(_ context.Context, c string) error {
		mu.Lock()
		sent = append(sent, c)
		mu.Unlock()
		got <- struct{}{}
		return nil
	}, testLogger(), func(string) {})
	ft := &fakeTimers{}
	n.after = ft.after
	wait := func(k int) []string {
		t.Helper()
		for range k {
			select {
			case <-got:
			case <-time.After(10 * time.Second):
				t.Fatal("a notification was not sent")
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sent)
	}
	for range 50 {
		n.mark("a")
	}
	if s := wait(1); !slices.Equal(s, []string{"a"}) {
		t.Fatalf("after 50 marks in one interval: %v, want one at once", s)
	}
	ft.fire() // the interval ends with marks in it: one more
	if s := wait(1); !slices.Equal(s, []string{"a", "a"}) {
		t.Fatalf("at the end of a marked interval: %v", s)
	}
	ft.fire() // an interval without marks: quiet, nothing sent
	n.mark("a")
	n.mark("b")
	if s := wait(2); len(s) != 4 || !slices.Contains(s[2:], "a") || !slices.Contains(s[2:], "b") {
		t.Fatalf("after a quiet interval, a and b each at once: %v", s)
	}
	n.mark("b")
	n.close()
	if s := wait(1); len(s) != 5 || s[4] != "b" {
		t.Fatalf("close did not send the marked consumer: %v", s)
	}
	n.mark("c") // after close: ignored
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 5 {
		t.Fatalf("a mark after close was sent: %v", sent)
	}
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
