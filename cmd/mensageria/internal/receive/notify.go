package receive

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// notifier announces stored rows on PostgreSQL: NOTIFY <schema>_inbox with
// the consumer's name, after the transaction that stored them committed.
// Per consumer, the first mark after a quiet spell is sent at once and the
// marks of the following interval become one notification at its end, so
// a burst costs one NOTIFY an interval (each takes a database-wide lock at
// commit) and its last rows are still announced.
type notifier struct {
	interval time.Duration
	send     func(ctx context.Context, consumer string) error
	log      *slog.Logger
	// after starts a timer; tests replace it to fire timers by hand.
	after func(d time.Duration, f func()) (stop func() bool)
	// sent counts notifications by result ("ok", "error").
	sent func(result string)

	mu      sync.Mutex
	quiet   map[string]*cooling // consumers inside an interval
	closed  bool
	queue   chan string
	done    chan struct{}
	sending sync.WaitGroup
}

type cooling struct {
	dirty bool // marked since the last notification
	stop  func() bool
}

func newNotifier(interval time.Duration, send func(context.Context, string) error, log *slog.Logger, sent func(string)) *notifier {
	n := &notifier{
		interval: interval, send: send, log: log, sent: sent,
		after: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop },
		quiet: map[string]*cooling{},
		queue: make(chan string, 256),
		done:  make(chan struct{}),
	}
	n.sending.Add(1)
	go n.loop()
	return n
}

// mark says rows of consumer were committed.
func (n *notifier) mark(consumer string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	if c, ok := n.quiet[consumer]; ok {
		c.dirty = true
		return
	}
	n.enqueue(consumer)
	c := &cooling{}
	n.quiet[consumer] = c
	c.stop = n.after(n.interval, func() { n.expire(consumer, c) })
}

// expire ends consumer's interval: a notification for what was marked in
// it, and another interval; or, when nothing was, quiet.
func (n *notifier) expire(consumer string, c *cooling) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.quiet[consumer] != c || n.closed {
		return
	}
	if !c.dirty {
		delete(n.quiet, consumer)
		return
	}
	c.dirty = false
	n.enqueue(consumer)
	c.stop = n.after(n.interval, func() { n.expire(consumer, c) })
}

// enqueue hands a notification to the sending loop; n.mu is held. A full
// queue (the database far slower than the marks) drops it: the consumers
// queued already are woken, and the app's poll covers the rest.
func (n *notifier) enqueue(consumer string) {
	select {
	case n.queue <- consumer:
	default:
		n.sent("dropped")
	}
}

func (n *notifier) loop() {
	defer n.sending.Done()
	for {
		select {
		case c := <-n.queue:
			n.deliver(c)
		case <-n.done:
			for {
				select {
				case c := <-n.queue:
					n.deliver(c)
				default:
					return
				}
			}
		}
	}
}

func (n *notifier) deliver(consumer string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.send(ctx, consumer); err != nil {
		n.sent("error")
		n.log.Warn("inbox notification failed; the app's poll will find the rows", "consumer", consumer, "err", err)
		return
	}
	n.sent("ok")
}

// close sends what is still marked, then stops.
func (n *notifier) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	for consumer, c := range n.quiet {
		c.stop()
		if c.dirty {
			n.enqueue(consumer)
		}
	}
	n.quiet = nil
	n.mu.Unlock()
	close(n.done)
	n.sending.Wait()
}
