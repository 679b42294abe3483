package mensageria

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/xadm/mensageria/driver"
)

// partConfig is a valid Config with its defaults, for one part under test.
func partConfig(t *testing.T, reg *Registry, edit func(*Config)) *Config {
	t.Helper()
	cfg := Config{App: "parts", Registry: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if edit != nil {
		edit(&cfg)
	}
	out, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	return &out
}

// fakeLeader is leadership as the other parts see it.
type fakeLeader struct {
	leader  atomic.Bool
	epoch   int64
	changed chan struct{}
	asked   chan bool // each isLeader answer, when not nil
}

func newFakeLeader(leads bool) *fakeLeader {
	l := &fakeLeader{epoch: 3, changed: make(chan struct{}, 1)}
	l.leader.Store(leads)
	return l
}

func (l *fakeLeader) isLeader() bool {
	v := l.leader.Load()
	if l.asked != nil {
		select {
		case l.asked <- v:
		default:
		}
	}
	return v
}

func (l *fakeLeader) fence() *driver.Fence     { return &driver.Fence{App: "parts", Epoch: l.epoch} }
func (l *fakeLeader) changes() <-chan struct{} { return l.changed }

func (l *fakeLeader) lead() {
	l.leader.Store(true)
	signal(l.changed)
}

// events records what a fake is told, from any goroutine.
type events[T any] struct {
	mu  sync.Mutex
	got []T
}

func (e *events[T]) add(v T) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, v)
}

func (e *events[T]) all() []T {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]T(nil), e.got...)
}

// routeLog records the route transitions it is told of.
type routeLog struct{ events[RouteState] }

func (r *routeLog) routeChanged(_ *route, c *change, _ RouteHealth) {
	if c != nil {
		r.add(c.to)
	}
}

// fixedTokens hands out one token.
type fixedTokens int64

func (f fixedTokens) token() int64 { return int64(f) }

// okSender delivers everything.
var okSender = SenderFunc(func(context.Context, *Delivery) error { return nil })
