package console

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/xadm/mensageria/ops"
)

// counter keeps the last per-type counts (ops.ReadCounts, which reads
// every pending row) and recounts in the background when they are older
// than the refresh interval: a page load never waits for a count except
// the very first, and however many pages load, the database counts at most
// once per interval. The interval is MinRefresh or ten times what the last
// count took, whichever is longer, so the counting never takes more than a
// tenth of one database backend's time.
type counter struct {
	ctx context.Context
	ops *ops.Ops
	min time.Duration
	log *slog.Logger

	mu      sync.Mutex
	last    *countSnapshot // nil before the first count ends
	running chan struct{}  // closed when the running count ends; nil when idle
	stale   bool           // an action changed rows: recount at the next look
	wg      sync.WaitGroup
}

type countSnapshot struct {
	at   time.Time // when the count began
	took time.Duration
	// counted is the outbox per type with, on a backend whose schema
	// holds it, the receive daemon's inbox queue per consumer (counted
	// with the outbox, for the same reason); nil when no count succeeded.
	counted *ops.Counted
	err     error
}

func newCounter(ctx context.Context, o *ops.Ops, min time.Duration, log *slog.Logger) *counter {
	c := &counter{ctx: ctx, ops: o, min: min, log: log}
	c.mu.Lock()
	c.startLocked()
	c.mu.Unlock()
	return c
}

func (c *counter) interval(s *countSnapshot) time.Duration {
	return max(c.min, 10*s.took)
}

// get returns the last counts, starting a recount when they are due; it
// waits only when there are none yet.
func (c *counter) get(ctx context.Context) (*countSnapshot, error) {
	c.mu.Lock()
	last := c.last
	if last == nil || c.stale || time.Since(last.at) >= c.interval(last) {
		c.startLocked()
	}
	running := c.running
	c.mu.Unlock()
	if last != nil {
		return last, nil
	}
	if running == nil {
		return nil, errors.New("mensageria/console: closed")
	}
	select {
	case <-running:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last, nil
}

// invalidate makes the next look recount: an action moved rows.
func (c *counter) invalidate() {
	c.mu.Lock()
	c.stale = true
	c.mu.Unlock()
}

func (c *counter) startLocked() {
	if c.running != nil || c.ctx.Err() != nil {
		return
	}
	done := make(chan struct{})
	c.running = done
	c.stale = false
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		began := time.Now()
		ctx, cancel := context.WithTimeout(c.ctx, time.Minute)
		counted, err := c.ops.ReadCounts(ctx)
		cancel()
		s := &countSnapshot{at: began, took: time.Since(began), counted: counted, err: err}
		if err != nil {
			c.log.Warn("console: counting the outbox failed", "err", err)
		}
		c.mu.Lock()
		// A failed recount keeps showing the last good counts (their age
		// says how old they are) rather than none.
		if err == nil || c.last == nil || c.last.err != nil {
			c.last = s
		} else {
			kept := *c.last
			kept.err = err
			c.last = &kept
		}
		c.running = nil
		c.mu.Unlock()
		close(done)
	}()
}

func (c *counter) wait() { c.wg.Wait() }
