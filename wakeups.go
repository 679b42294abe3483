package mensageria

// The relay's parts wake one another through channels of one slot
// (wake, record, doubted, a route's kick, leadership's changes): a wake-up
// sent while one is pending is the same wake-up, so a sender never blocks
// and a sleeper never misses the latest one. stopping is closed once.

import (
	"context"
	"time"
)

// closed reports whether ch, which is only ever closed, is.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// signal wakes up whoever waits on ch, once however many signal it.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// sleep waits d, or less if ctx ends first.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
