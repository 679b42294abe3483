package clienttest_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/mensageriatest"
)

// legacy is a receiver that cannot be idempotent: every request that
// reaches it applies its effect again. Each key's behaviour says what the
// relay hears back.
type legacy struct {
	mu      sync.Mutex
	effects map[string]int
	sent    map[string]int // requests the Sender was asked to make
	// answer, per key and attempt (1-based), returns what the relay hears
	// and whether the effect was applied; nil: applied, 2xx.
	answer func(key string, attempt int) (applied bool, err error)
}

func newLegacy() *legacy { return &legacy{effects: map[string]int{}, sent: map[string]int{}} }

func (l *legacy) Send(ctx context.Context, d *mensageria.Delivery) error {
	if !d.AtMostOnce {
		return mensageria.Permanent(errors.New("legacy: delivered on a route that is not AtMostOnce"))
	}
	l.mu.Lock()
	l.sent[d.Key]++
	n := l.sent[d.Key]
	l.mu.Unlock()
	applied, err := true, error(nil)
	if l.answer != nil {
		applied, err = l.answer(d.Key, n)
	}
	if applied {
		l.mu.Lock()
		l.effects[d.Key]++
		l.mu.Unlock()
	}
	return err
}

func (l *legacy) count(key string) (effects, sent int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.effects[key], l.sent[key]
}

// Reconcile answers from the receiver's own record, as a probe on the
// natural key does.
func (l *legacy) Reconcile(ctx context.Context, d *mensageria.Delivery) (mensageria.Reconciliation, error) {
	if e, _ := l.count(d.Key); e > 0 {
		return mensageria.Applied, nil
	}
	return mensageria.NotApplied, nil
}

var errTimeout = mensageria.Unavailable(errors.New("legacy: timeout awaiting response headers"))

func typeStats(t *testing.T, d driver.Driver, typ string) driver.TypeStats {
	t.Helper()
	all, err := d.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Type == typ {
			return s
		}
	}
	return driver.TypeStats{Type: typ}
}

func inDoubtKeys(t *testing.T, d driver.Driver, typ string) map[string]bool {
	t.Helper()
	jobs, err := d.ListMessages(context.Background(), driver.ListFilter{State: driver.StateInDoubt, Types: []string{typ}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, j := range jobs {
		out[j.Key] = true
	}
	return out
}

// A message whose answer was lost after the receiver applied it is in
// doubt and never sent again; one refused before it was sent is retried;
// the others are delivered once each.
func TestAtMostOnceRouteLeavesUnknownOutcomesInDoubt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		app := uniqueApp("amo")
		typ := app + ".lancamento"
		l := newLegacy()
		l.answer = func(key string, attempt int) (bool, error) {
			switch {
			case key == "lost":
				return true, errTimeout // applied, the answer lost
			case key == "cut":
				return false, mensageria.Unavailable(errors.New("legacy: connection reset after the request was written"))
			case key == "refused" && attempt == 1:
				return false, mensageria.NotSent(mensageria.Unavailable(errors.New("dial tcp: connection refused")))
			case key == "gone":
				return false, mensageria.Permanent(errors.New("legacy: 422 no such account"))
			}
			return true, nil
		}
		reg := mensageria.NewRegistry().MustRegister(typ, l, mensageria.Mode(mensageria.AtMostOnce))
		d := b.open()
		cfg := fastConfig(app, reg)
		var claims claimCounter
		cfg.Hooks = []mensageria.Hook{&claims}
		c := newClient(t, d, cfg)
		start(t, c)
		for _, k := range []string{"ok", "lost", "cut", "refused", "gone"} {
			if _, err := c.Enqueue(context.Background(), mensageria.Message{Type: typ, Key: k, Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		mensageriatest.Eventually(t, 10*time.Second, func() bool {
			s := typeStats(t, d, typ)
			return s.InDoubt == 2 && s.Pending == 0 && s.InFlight == 0 && s.Dead == 1 && s.DeliveredLastHr == 2
		}, "lost and cut in doubt, the rest settled")
		if got := inDoubtKeys(t, d, typ); !got["lost"] || !got["cut"] || len(got) != 2 {
			t.Fatalf("in doubt: %v, want lost and cut", got)
		}
		// A row left in doubt has no lease: a claim that took it would take
		// it at once. Ten claims later, and a message enqueued then and
		// delivered, the rows in doubt are still unsent.
		from := claims.n.Load()
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return claims.n.Load() >= from+10 }, "ten more claims")
		if _, err := c.Enqueue(context.Background(), mensageria.Message{Type: typ, Key: "after", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		mensageriatest.Eventually(t, 10*time.Second, func() bool {
			e, _ := l.count("after")
			return e == 1
		}, "the later message delivered")
		for key, want := range map[string][2]int{"ok": {1, 1}, "lost": {1, 1}, "cut": {0, 1}, "refused": {1, 2}, "gone": {0, 1}, "after": {1, 1}} {
			e, s := l.count(key)
			if e != want[0] || s != want[1] {
				t.Errorf("key %s: %d effects of %d requests, want %d of %d", key, e, s, want[0], want[1])
			}
		}
		if s := typeStats(t, d, typ); s.InDoubt != 2 || s.OldestInDoubt <= 0 {
			t.Fatalf("stats: %+v, want 2 in doubt with an age", s)
		}
	})
}

// With a probe, each message in doubt is resolved by the receiver's truth:
// the applied one is delivered, the one that never applied is sent once
// more; every effect exactly once, none left in doubt.
func TestAtMostOnceReconcileProbeResolvesDoubts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		app := uniqueApp("amor")
		typ := app + ".lancamento"
		l := newLegacy()
		l.answer = func(key string, attempt int) (bool, error) {
			switch {
			case key == "lost" && attempt == 1:
				return true, errTimeout
			case key == "cut" && attempt == 1:
				return false, mensageria.Unavailable(errors.New("legacy: connection reset after the request was written"))
			}
			return true, nil
		}
		reg := mensageria.NewRegistry().MustRegister(typ, l, mensageria.Mode(mensageria.AtMostOnce), mensageria.Reconcile(l))
		d := b.open()
		cfg := fastConfig(app, reg)
		cfg.ReconcileInterval = 50 * time.Millisecond
		start(t, newClient(t, d, cfg))
		c := newClient(t, b.open(), fastConfig(app, reg))
		for _, k := range []string{"ok", "lost", "cut"} {
			if _, err := c.Enqueue(context.Background(), mensageria.Message{Type: typ, Key: k, Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		mensageriatest.Eventually(t, 15*time.Second, func() bool {
			s := typeStats(t, d, typ)
			return s.DeliveredLastHr == 3 && s.InDoubt == 0 && s.Pending == 0 && s.InFlight == 0
		}, "every message delivered, none in doubt")
		for key, want := range map[string][2]int{"ok": {1, 1}, "lost": {1, 1}, "cut": {1, 2}} {
			e, s := l.count(key)
			if e != want[0] || s != want[1] {
				t.Errorf("key %s: %d effects of %d requests, want %d of %d", key, e, s, want[0], want[1])
			}
		}
	})
}

// A Stop that cuts a send short leaves the message in doubt, not released:
// the request may have left.
func TestAtMostOnceStopDuringSendLeavesItInDoubt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		app := uniqueApp("amos")
		typ := app + ".lancamento"
		began := make(chan struct{})
		var once sync.Once
		s := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
			once.Do(func() { close(began) })
			<-ctx.Done()
			return ctx.Err()
		})
		reg := mensageria.NewRegistry().MustRegister(typ, s, mensageria.Mode(mensageria.AtMostOnce))
		d := b.open()
		c := newClient(t, d, fastConfig(app, reg))
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Enqueue(context.Background(), mensageria.Message{Type: typ, Key: "k", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-began:
		case <-time.After(10 * time.Second):
			t.Fatal("the send never began")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = c.Stop(ctx)
		mensageriatest.Eventually(t, 5*time.Second, func() bool { return typeStats(t, d, typ).InDoubt == 1 }, "the message in doubt")
		if st := typeStats(t, d, typ); st.Pending != 0 {
			t.Fatalf("stats after the cut send: %+v, want nothing pending", st)
		}
	})
}

type hiddenAMO struct{ driver.Driver } // hides driver.AtMostOnce

func TestAtMostOnceConfigErrors(t *testing.T) {
	s := &recorder{}
	var ce *mensageria.ConfigError
	if err := mensageria.NewRegistry().Register("t", s, mensageria.Reconcile(newLegacy())); !errors.As(err, &ce) || ce.Field != "Reconcile" {
		t.Fatalf("a probe on an at-least-once route: %v, want a ConfigError on Reconcile", err)
	}
	if err := mensageria.NewRegistry().Register("t", s, mensageria.Mode(7)); !errors.As(err, &ce) || ce.Field != "Mode" {
		t.Fatalf("an unknown mode: %v, want a ConfigError on Mode", err)
	}
	reg := mensageria.NewRegistry().MustRegister("a", s, mensageria.Mode(mensageria.AtMostOnce))
	if err := reg.Register("b", s); !errors.As(err, &ce) || ce.Field != "Mode" {
		t.Fatalf("two modes on one Sender: %v, want a ConfigError on Mode", err)
	}
	if _, err := mensageria.New(hiddenAMO{sqliteBackend(t).open()}, &mensageria.Config{App: "x", ReconcileInterval: -1}); !errors.As(err, &ce) || ce.Field != "ReconcileInterval" {
		t.Fatalf("a negative ReconcileInterval: %v", err)
	}
	b := sqliteBackend(t)
	c := newClient(t, hiddenAMO{b.open()}, fastConfig(uniqueApp("amoh"), mensageria.NewRegistry().MustRegister("h.t", s, mensageria.Mode(mensageria.AtMostOnce))))
	err := c.Start(context.Background())
	if !errors.Is(err, mensageria.ErrAtMostOnceUnsupported) || !errors.As(err, &ce) {
		_ = c.Stop(context.Background())
		t.Fatalf("Start on a driver without at-most-once support: %v, want ErrAtMostOnceUnsupported", err)
	}
}

// A probe that cannot tell leaves the message in doubt, with the probe's
// error as its reason, and it is never sent again; a probe that says "not
// applied" for a message out of attempts parks it dead instead of sending.
func TestAtMostOnceProbeWithoutAnAnswerAndOutOfAttempts(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		app := uniqueApp("amop")
		typ := app + ".lancamento"
		l := newLegacy()
		l.answer = func(key string, attempt int) (bool, error) { return key == "unsure", errTimeout }
		var probes sync.Map
		probe := mensageria.ReconcilerFunc(func(ctx context.Context, d *mensageria.Delivery) (mensageria.Reconciliation, error) {
			n, _ := probes.LoadOrStore(d.Key, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			if d.Key == "unsure" {
				return mensageria.Unknown, errors.New("legacy: 502 from the status endpoint")
			}
			return mensageria.NotApplied, nil
		})
		reg := mensageria.NewRegistry().MustRegister(typ, l, mensageria.Mode(mensageria.AtMostOnce), mensageria.Reconcile(probe))
		d := b.open()
		cfg := fastConfig(app, reg)
		cfg.ReconcileInterval = 50 * time.Millisecond
		cfg.MaxAttempts = 1
		start(t, newClient(t, d, cfg))
		c := newClient(t, b.open(), fastConfig(app, reg))
		for _, k := range []string{"unsure", "spent"} {
			if _, err := c.Enqueue(context.Background(), mensageria.Message{Type: typ, Key: k, Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		// Between probes (a probe holds the row under its lease, when it is
		// in flight, not in doubt).
		mensageriatest.Eventually(t, 15*time.Second, func() bool {
			n, ok := probes.Load("unsure")
			s := typeStats(t, d, typ)
			if !ok || n.(*atomic.Int64).Load() < 2 || s.InDoubt != 1 || s.Dead != 1 {
				return false
			}
			jobs, err := d.ListMessages(context.Background(), driver.ListFilter{State: driver.StateInDoubt, Types: []string{typ}})
			if err != nil {
				t.Fatal(err)
			}
			return len(jobs) == 1 && jobs[0].Key == "unsure" && strings.Contains(jobs[0].LastError, "502 from the status endpoint")
		}, "unsure probed twice and in doubt with the probe's error; spent dead")
		for key, want := range map[string][2]int{"unsure": {1, 1}, "spent": {0, 1}} {
			e, s := l.count(key)
			if e != want[0] || s != want[1] {
				t.Errorf("key %s: %d effects of %d requests, want %d of %d", key, e, s, want[0], want[1])
			}
		}
	})
}

// A relay whose send outlasts its lease (a receiver that answers 2xx, but
// too late) cannot record the delivery: the row is in doubt, never sent
// again, and the log says so rather than promising a redelivery.
func TestAtMostOnceLeaseLostWhileSending(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		app := uniqueApp("amol")
		typ := app + ".lancamento"
		var sends atomic.Int64
		slow := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
			sends.Add(1)
			time.Sleep(1500 * time.Millisecond) // past the 1s lease, ignoring ctx
			return nil
		})
		reg := mensageria.NewRegistry().MustRegister(typ, slow, mensageria.Mode(mensageria.AtMostOnce))
		d := b.open()
		cfg := fastConfig(app, reg)
		log, buf := capture()
		cfg.Logger = log
		var claims claimCounter
		cfg.Hooks = []mensageria.Hook{&claims}
		start(t, newClient(t, d, cfg))
		c := newClient(t, b.open(), fastConfig(app, reg))
		if _, err := c.Enqueue(context.Background(), mensageria.Message{Type: typ, Key: "k", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		mensageriatest.Eventually(t, 10*time.Second, func() bool {
			return typeStats(t, d, typ).InDoubt == 1 && strings.Contains(buf.String(), "rows of at-most-once routes are in doubt")
		}, "the message in doubt after its lease")
		// A row in doubt is past its lease: a claim that took it would
		// take it at once. Ten claims later it was still sent once.
		from := claims.n.Load()
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return claims.n.Load() >= from+10 }, "ten more claims")
		if n := sends.Load(); n != 1 {
			t.Fatalf("sent %d times, want 1", n)
		}
		if strings.Contains(buf.String(), "will be delivered again") {
			t.Fatalf("the log promises a redelivery of an at-most-once row:\n%s", buf.String())
		}
	})
}

type claimCounter struct{ n atomic.Int64 }

func (c *claimCounter) OnClaim(mensageria.ClaimEvent) { c.n.Add(1) }
