package clienttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/internal/testsignal"
	"github.com/xadm/mensageria/mensageriatest"
)

// Contract 7: between replicas of one app, one relay is active.
func TestOneActiveRelayPerApp(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		app := uniqueApp("replicas")
		recA, recB := &recorder{}, &recorder{}
		// A lease long enough that a loaded machine does not stall the
		// leader's renewals past it (which would be a legitimate failover).
		cfgA := fastConfig(app, mensageria.NewRegistry().MustRegister("t", recA))
		cfgB := fastConfig(app, mensageria.NewRegistry().MustRegister("t", recB))
		cfgA.Lease, cfgB.Lease = 5*time.Second, 5*time.Second
		a := newClient(t, b.open(), cfgA)
		bb := newClient(t, b.open(), cfgB)
		sigA, sigB := testsignal.ForClient(a), testsignal.ForClient(bb)
		start(t, a)
		start(t, bb)
		// Once both have had their first election round, one leads.
		sigA.Elected.WaitOrTimeout(t)
		sigB.Elected.WaitOrTimeout(t)
		if a.IsLeader() == bb.IsLeader() {
			t.Fatalf("leaders: a=%v b=%v; want exactly one", a.IsLeader(), bb.IsLeader())
		}
		for i := range 20 {
			if _, err := a.Enqueue(ctx, mensageria.Message{Type: "t", Key: fmt.Sprintf("k%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return recA.len()+recB.len() >= 20 }, "delivered")
		if recA.len() > 0 && recB.len() > 0 {
			t.Fatalf("both replicas delivered (%d and %d)", recA.len(), recB.len())
		}
		// A graceful stop hands over at once.
		leader, standby, standbyRec := a, bb, recB
		if bb.IsLeader() {
			leader, standby, standbyRec = bb, a, recA
		}
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := leader.Stop(stopCtx); err != nil {
			t.Fatal(err)
		}
		mensageriatest.Eventually(t, 5*time.Second, standby.IsLeader, "the standby takes over")
		if _, err := standby.Enqueue(ctx, mensageria.Message{Type: "t", Key: "after"}); err != nil {
			t.Fatal(err)
		}
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return standbyRec.keys()["after"] == 1 }, "the new leader delivers")
	})
}

// A leader whose database sessions die keeps its election: the lease row
// outlives its sessions (ADR 0025), so its pool reconnects, its next round
// renews with the same epoch and it goes on delivering while the standby
// stands by; when it stops, it gives the election up and the standby takes
// over at once, not a lease later.
func TestFailoverWhenLeaderConnectionDies(t *testing.T) {
	b := pgBackend(t)
	ctx := context.Background()
	app := uniqueApp("failover")
	schema := strings.TrimSuffix(b.table("outbox"), ".outbox")
	// a's own pool, its sessions named so that the test kills only them.
	pcfg, err := pgxpool.ParseConfig(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = app + "-a"
	poolA, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(poolA.Close)
	drvA, err := postgres.New(poolA, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	recA, recB := &recorder{}, &recorder{}
	cfgA := fastConfig(app, mensageria.NewRegistry().MustRegister("t", recA))
	cfgA.Lease = 3 * time.Second // longer than a reconnection, shorter than the test's waits
	a := newClient(t, drvA, cfgA)
	sigA := testsignal.ForClient(a)
	start(t, a)
	mensageriatest.Eventually(t, 10*time.Second, a.IsLeader, "a leads")
	el, err := b.open().Elector(app, cfgA.Lease)
	if err != nil {
		t.Fatal(err)
	}
	before, err := el.Holder(ctx)
	if err != nil || before.Holder == "" {
		t.Fatalf("Holder while a leads: %+v %v", before, err)
	}
	cfgB := fastConfig(app, mensageria.NewRegistry().MustRegister("t", recB))
	cfgB.Lease = cfgA.Lease
	bb := newClient(t, b.open(), cfgB)
	sigB := testsignal.ForClient(bb)
	start(t, bb)
	if sigB.Elected.WaitOrTimeout(t) || bb.IsLeader() {
		t.Fatal("b leads while a is alive")
	}

	if err := b.exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app+"-a"); err != nil {
		t.Fatal(err)
	}
	// A round after the kill that a won: its sessions are new.
	for !sigA.Elected.WaitOrTimeout(t) {
	}
	after, err := el.Holder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.Holder != before.Holder || after.Epoch != before.Epoch || !a.IsLeader() || bb.IsLeader() {
		t.Fatalf("after a's sessions died the election is %+v (a leads %v, b leads %v); want a's, at epoch %d", after, a.IsLeader(), bb.IsLeader(), before.Epoch)
	}
	// Enqueued on the other pool: a's may still hand out a killed session.
	if _, err := bb.Enqueue(ctx, mensageria.Message{Type: "t", Key: "after-kill"}); err != nil {
		t.Fatal(err)
	}
	mensageriatest.Eventually(t, 10*time.Second, func() bool { return recA.keys()["after-kill"] == 1 }, "a delivers")

	stopped := time.Now()
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	mensageriatest.Eventually(t, 10*time.Second, bb.IsLeader, "b takes over")
	if took := time.Since(stopped); took >= cfgA.Lease {
		t.Fatalf("b took over %s after a stopped; a Stop gives the election up, it should not wait for the lease (%s)", took, cfgA.Lease)
	}
	if _, err := bb.Enqueue(ctx, mensageria.Message{Type: "t", Key: "after-stop"}); err != nil {
		t.Fatal(err)
	}
	mensageriatest.Eventually(t, 10*time.Second, func() bool { return recB.keys()["after-stop"] == 1 }, "b delivers")
	if recA.keys()["after-stop"] != 0 || recB.keys()["after-kill"] != 0 {
		t.Fatal("a message went to the relay that did not lead")
	}
}

// pausable wraps a driver so a test can freeze its elector, as SIGSTOP
// freezes a process.
type pausable struct {
	driver.Driver
	paused atomic.Bool
	resume chan struct{}
}

type pausedElector struct {
	driver.Elector
	p *pausable
}

func (p *pausable) Elector(app string, lease time.Duration) (driver.Elector, error) {
	el, err := p.Driver.Elector(app, lease)
	return &pausedElector{Elector: el, p: p}, err
}

func (e *pausedElector) Acquire(ctx context.Context) (int64, bool, error) {
	if e.p.paused.Load() {
		<-e.p.resume
	}
	return e.Elector.Acquire(ctx)
}

type outcomes struct {
	mu  sync.Mutex
	got []mensageria.Outcome
}

func (o *outcomes) OnDelivery(ev mensageria.DeliveryEvent) {
	o.mu.Lock()
	o.got = append(o.got, ev.Outcome)
	o.mu.Unlock()
}

func (o *outcomes) has(k mensageria.Outcome) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, g := range o.got {
		if g == k {
			return true
		}
	}
	return false
}

// Contract 7, fencing: a leader paused past its lease is replaced, and when
// it wakes its outcome cannot overwrite what the new leader settled.
func TestPausedLeaderCannotOverwrite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		app := uniqueApp("zombie")
		p := &pausable{Driver: b.open(), resume: make(chan struct{})}
		var resumeOnce sync.Once
		wake := func() { resumeOnce.Do(func() { close(p.resume) }) }
		t.Cleanup(wake)
		inSend := make(chan struct{})
		var once sync.Once
		zombieSender := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
			once.Do(func() {
				p.paused.Store(true)
				close(inSend)
			})
			<-p.resume // frozen mid-delivery
			return mensageria.Permanent(errors.New("zombie says no"))
		})
		seen := &outcomes{}
		cfgA := fastConfig(app, mensageria.NewRegistry().MustRegister("t", zombieSender))
		cfgA.Hooks = []mensageria.Hook{seen}
		a := newClient(t, p, cfgA)
		start(t, a)
		mensageriatest.Eventually(t, 10*time.Second, a.IsLeader, "a leads")
		if _, err := a.Enqueue(ctx, mensageria.Message{Type: "t", Key: "x"}); err != nil {
			t.Fatal(err)
		}
		<-inSend

		recB := &recorder{}
		cfgB := fastConfig(app, mensageria.NewRegistry().MustRegister("t", recB))
		cfgB.DeliveredRetention = time.Hour // keep the row to inspect it
		bb := newClient(t, b.open(), cfgB)
		start(t, bb)
		mensageriatest.Eventually(t, 15*time.Second, func() bool { return recB.keys()["x"] == 1 }, "b takes over and delivers")
		// b's Sender has the message before b settles it: wait for the
		// settle, so what follows tests the zombie and not b's pace.
		delivered := func() int {
			return b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE key = 'x' AND state = 'delivered'")
		}
		mensageriatest.Eventually(t, 15*time.Second, func() bool { return delivered() == 1 }, "b's settle recorded")

		wake() // the zombie wakes
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return seen.has(mensageria.OutcomeFenced) }, "the zombie's settle is fenced")
		if n := delivered(); n != 1 {
			t.Fatalf("the zombie overwrote the new leader's outcome")
		}
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return !a.IsLeader() }, "the zombie steps down")
	})
}

// Contract 6: per-key order holds under retries, and a failing message
// blocks only its own key.
func TestPerKeyOrderUnderRetries(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		var stuck atomic.Bool
		stuck.Store(true)
		var mu sync.Mutex
		seq := map[string][]int{}
		var rngMu sync.Mutex
		rng := rand.New(rand.NewPCG(1, 2))
		sender := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
			if d.Key == "stuck" && stuck.Load() {
				return errors.New("receiver for this key is down")
			}
			rngMu.Lock()
			fail := rng.IntN(3) == 0
			rngMu.Unlock()
			if fail {
				return errors.New("transient")
			}
			var p struct{ N int }
			if err := json.Unmarshal(d.Payload, &p); err != nil {
				return mensageria.Permanent(err)
			}
			mu.Lock()
			seq[d.Key] = append(seq[d.Key], p.N)
			mu.Unlock()
			return nil
		})
		cfg := fastConfig(uniqueApp("order"), mensageria.NewRegistry().MustRegister("status", sender, mensageria.Ordered()))
		cfg.MaxAttempts = 1000
		c := newClient(t, b.open(), cfg)
		keys := []string{"a", "b", "c", "d", "stuck"}
		const per = 15
		for n := range per {
			for _, k := range keys {
				if _, err := c.Enqueue(ctx, mensageria.Message{Type: "status", Key: k, Payload: json.RawMessage(fmt.Sprintf(`{"N":%d}`, n))}); err != nil {
					t.Fatal(err)
				}
			}
		}
		start(t, c)
		mensageriatest.Eventually(t, 30*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seq["a"]) == per && len(seq["b"]) == per && len(seq["c"]) == per && len(seq["d"]) == per
		}, "the healthy keys drain while one is blocked")
		mu.Lock()
		if len(seq["stuck"]) != 0 {
			t.Fatalf("the blocked key delivered %v", seq["stuck"])
		}
		mu.Unlock()
		stuck.Store(false)
		mensageriatest.Eventually(t, 30*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seq["stuck"]) == per
		}, "the blocked key drains")
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			for i, n := range seq[k] {
				if n != i {
					t.Fatalf("key %s delivered out of order: %v", k, seq[k])
				}
			}
		}
	})
}

// Stop is graceful: it stops claiming, lets the batch in flight finish and
// settle, and a second client finds nothing left half-done.
func TestStopFinishesInFlight(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		release := make(chan struct{})
		var started atomic.Int32
		sender := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
			started.Add(1)
			<-release
			return nil
		})
		app := uniqueApp("stop")
		cfg := fastConfig(app, mensageria.NewRegistry().MustRegister("t", sender))
		cfg.Concurrency = 4
		cfg.BatchSize = 4
		cfg.DeliveredRetention = time.Hour
		c := newClient(t, b.open(), cfg)
		for i := range 12 {
			if _, err := c.Enqueue(ctx, mensageria.Message{Type: "t", Key: fmt.Sprintf("k%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return started.Load() == 4 }, "deliveries in flight")
		done := make(chan error)
		go func() { done <- c.Stop(ctx) }()
		// Ready says stopped once Stop has taken the relay, before it
		// waits for the deliveries in flight.
		mensageriatest.Eventually(t, 5*time.Second, func() bool {
			err := c.Ready()
			return err != nil && strings.Contains(err.Error(), "stopped")
		}, "Stop began")
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		delivered := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE state = 'delivered'")
		leased := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE lease_token IS NOT NULL")
		if delivered != int(started.Load()) || leased != 0 {
			t.Fatalf("after Stop: %d delivered of %d started, %d still leased", delivered, started.Load(), leased)
		}

		// A stop whose deadline passes releases what is in flight, without
		// counting the attempt. (The next relay of the app: the type is
		// its.)
		block := make(chan struct{})
		defer close(block)
		cfg2 := fastConfig(app, mensageria.NewRegistry().MustRegister("t", mensageria.SenderFunc(
			func(ctx context.Context, d *mensageria.Delivery) error {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-block:
					return nil
				}
			})))
		c2 := newClient(t, b.open(), cfg2)
		if err := c2.Start(ctx); err != nil {
			t.Fatal(err)
		}
		mensageriatest.Eventually(t, 10*time.Second, func() bool {
			return b.count("SELECT count(*) FROM "+b.table("outbox")+" WHERE lease_token IS NOT NULL") > 0
		}, "claimed")
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if err := c2.Stop(short); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop past its deadline: %v", err)
		}
		if n := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE state = 'pending' AND (lease_token IS NOT NULL OR attempts <> 0)"); n != 0 {
			t.Fatalf("%d rows left leased or with a counted attempt after a cancelled stop", n)
		}
	})
}
