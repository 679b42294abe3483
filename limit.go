package mensageria

import (
	"sync"
	"time"
)

// pacer spaces one route's deliveries at least 1/rate apart: each takes
// the next free slot, and a slot left unused is never saved up, so no
// window of one second ever sees more than rate+1 messages start. Claims
// of the route ask for a tenth of a second's worth at a time, so what is
// claimed is delivered well within its lease and a slow rate never holds
// rows the relay could give back.
type pacer struct {
	mu       sync.Mutex
	interval time.Duration
	next     time.Time
}

// pacerLookahead is how much of a route's rate one claim takes.
const pacerLookahead = 100 * time.Millisecond

func newPacer(perSecond float64) *pacer {
	return &pacer{interval: max(time.Duration(float64(time.Second)/perSecond), time.Nanosecond)}
}

// take reserves n consecutive slots and returns the first and the last.
func (p *pacer) take(now time.Time, n int) (first, last time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	first = p.next
	if first.Before(now) {
		first = now
	}
	last = first.Add(time.Duration(n-1) * p.interval)
	p.next = last.Add(p.interval)
	return first, last
}

// wait is how long until the next free slot (0: one is free now).
func (p *pacer) wait(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(p.next.Sub(now), 0)
}

// claimSize is how many rows one claim of the route takes: what its rate
// delivers in pacerLookahead, at least one, at most the batch size.
func (p *pacer) claimSize(batch int) int {
	n := int(pacerLookahead / p.interval)
	return min(max(n, 1), batch)
}
