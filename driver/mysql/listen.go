package mysql

import (
	"context"
	"sync"

	"github.com/xadm/mensageria/driver"
)

// Listen subscribes to enqueues made through this *Driver (Insert, and
// InsertTx, with Notify). SQLite has no cross-process notification, so
// relays in other processes, and plain SQL inserts, are found by polling.
// The listener ends when ctx ends, on Close, or when the driver closes; its
// channel is then closed.
func (d *Driver) Listen(ctx context.Context) (driver.Listener, error) {
	l := &listener{d: d, ch: make(chan struct{}, 1)}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, ErrClosed
	}
	d.listeners[l] = struct{}{}
	d.mu.Unlock()
	stop := context.AfterFunc(ctx, func() {
		d.mu.Lock()
		l.closeLocked()
		d.mu.Unlock()
	})
	d.mu.Lock()
	l.stop = stop
	d.mu.Unlock()
	return l, nil
}

func (d *Driver) notify() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for l := range d.listeners {
		select {
		case l.ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

type listener struct {
	d    *Driver
	ch   chan struct{}
	stop func() bool
	once sync.Once
}

func (l *listener) C() <-chan struct{} { return l.ch }

func (l *listener) Close() error {
	l.d.mu.Lock()
	l.closeLocked()
	stop := l.stop
	l.d.mu.Unlock()
	if stop != nil {
		stop()
	}
	return nil
}

// closeLocked runs under d.mu, which notify also holds, so no send races
// the close.
func (l *listener) closeLocked() {
	l.once.Do(func() {
		delete(l.d.listeners, l)
		close(l.ch)
	})
}
