package clienttest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriatest"
)

// observer records the claims and delivery outcomes a relay reports.
type observer struct {
	mu       sync.Mutex
	claims   []int // rows per claim, in order
	outcomes []mensageria.DeliveryEvent
}

func (o *observer) OnClaim(ev mensageria.ClaimEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ev.Err == nil {
		o.claims = append(o.claims, ev.Claimed)
	}
}

func (o *observer) OnDelivery(ev mensageria.DeliveryEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes = append(o.outcomes, ev)
}

func (o *observer) claimed() []int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]int(nil), o.claims...)
}

func (o *observer) count(k mensageria.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, ev := range o.outcomes {
		if ev.Outcome == k {
			n++
		}
	}
	return n
}

func (o *observer) events() []mensageria.DeliveryEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]mensageria.DeliveryEvent(nil), o.outcomes...)
}

// A zombie's settle is reported for what it is: "fenced" only when another
// relay owns the row now, "expired" when the relay's own lease ran out and
// nobody took the row meanwhile; the log says the same.
func TestZombieSettleOutcomesAreTruthful(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		t.Run("expired", func(t *testing.T) {
			ctx := context.Background()
			const lease = time.Second
			slow := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
				if d.Attempt == 1 {
					// Stuck in a call that ignores its context until the
					// lease, stamped before this call began, is over.
					time.Sleep(lease + 300*time.Millisecond)
				}
				return nil
			})
			obs := &observer{}
			log, lb := capture()
			cfg := fastConfig(uniqueApp("expired"), mensageria.NewRegistry().MustRegister("slow", slow))
			cfg.Lease, cfg.BatchesInFlight, cfg.Election = lease, 1, mensageria.ElectionNone
			cfg.Hooks, cfg.Logger = []mensageria.Hook{obs}, log
			c := newClient(t, b.open(), cfg)
			if _, err := c.Enqueue(ctx, mensageria.Message{Type: "slow", Key: "k"}); err != nil {
				t.Fatal(err)
			}
			start(t, c)
			mensageriatest.Eventually(t, 20*time.Second, func() bool { return obs.count(mensageria.OutcomeDelivered) == 1 }, "the redelivery is settled")
			evs := obs.events()
			if len(evs) != 2 || evs[0].Outcome != mensageria.OutcomeExpired || evs[0].Attempt != 1 || evs[1].Attempt != 2 {
				t.Fatalf("events %+v: want attempt 1 expired, attempt 2 delivered", evs)
			}
			out := lb.String()
			if !strings.Contains(out, "lease expired before settle; 1 rows will be delivered again") || strings.Contains(out, "another relay owns") {
				t.Fatalf("log:\n%s", out)
			}
		})
		t.Run("fenced", func(t *testing.T) {
			ctx := context.Background()
			app := uniqueApp("fenced")
			inSend, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			zombie := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
				once.Do(func() { close(inSend) })
				<-release // frozen until another relay has delivered the row
				return nil
			})
			obs := &observer{}
			log, lb := capture()
			cfgA := fastConfig(app, mensageria.NewRegistry().MustRegister("stuck", zombie))
			cfgA.BatchesInFlight, cfgA.Election = 1, mensageria.ElectionNone
			cfgA.Hooks, cfgA.Logger = []mensageria.Hook{obs}, log
			a := newClient(t, b.open(), cfgA)
			if _, err := a.Enqueue(ctx, mensageria.Message{Type: "stuck", Key: "k"}); err != nil {
				t.Fatal(err)
			}
			start(t, a)
			t.Cleanup(func() {
				select {
				case <-release:
				default:
					close(release)
				}
			})
			<-inSend
			rec := &recorder{}
			cfgB := fastConfig(app, mensageria.NewRegistry().MustRegister("stuck", rec))
			cfgB.Election = mensageria.ElectionNone
			start(t, newClient(t, b.open(), cfgB))
			mensageriatest.Eventually(t, 20*time.Second, func() bool { return rec.len() == 1 }, "the other relay delivers the row after the lease")
			close(release)
			mensageriatest.Eventually(t, 10*time.Second, func() bool { return len(obs.events()) == 1 }, "the zombie settles")
			if ev := obs.events()[0]; ev.Outcome != mensageria.OutcomeFenced {
				t.Fatalf("the zombie's outcome was reported %s, want fenced", ev.Outcome)
			}
			out := lb.String()
			if !strings.Contains(out, "another relay owns 1 rows") || strings.Contains(out, "lease expired before settle") {
				t.Fatalf("log:\n%s", out)
			}
		})
	})
}

// Issue #10, failure 6: a relay that can deliver but cannot settle (its
// role lost DELETE on the outbox) used to deliver every batch, fail the
// settle, redeliver the whole backlog every lease, stay ready and count it
// all as fenced. Now its outcomes are "unsettled", never "fenced"; Ready
// says why; while settles fail it claims one row at a time; and once the
// privilege is back the backlog drains and Ready is nil again.
func TestSettleFailingOnADatabaseError(t *testing.T) {
	b := pgBackend(t)
	ctx := context.Background()
	// What a relay needs, less deleting outbox rows: claims (UPDATE) work,
	// settling a delivered row (DELETE) is refused.
	role, _, roleDrv := rolePool(t, b, nil)
	if err := b.exec("REVOKE DELETE ON " + b.table("outbox") + " FROM " + role); err != nil {
		t.Fatal(err)
	}

	app := uniqueApp("revoked")
	const backlog, batch, inFlight = 100, 20, 2
	producer := newClient(t, b.open(), fastConfig(app, mensageria.NewRegistry().MustRegister("t", &recorder{})))
	for i := range backlog {
		if _, err := producer.Enqueue(ctx, mensageria.Message{Type: "t", Key: fmt.Sprintf("k%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	rec := &recorder{}
	obs := &observer{}
	log, lb := capture()
	cfg := fastConfig(app, mensageria.NewRegistry().MustRegister("t", rec))
	cfg.Lease, cfg.BatchSize, cfg.BatchesInFlight = 2*time.Second, batch, inFlight
	cfg.Hooks, cfg.Logger = []mensageria.Hook{obs}, log
	relay := newClient(t, roleDrv, cfg)
	start(t, relay)

	mensageriatest.Eventually(t, 20*time.Second, func() bool {
		err := relay.Ready()
		return err != nil && strings.Contains(err.Error(), "settle failing for")
	}, "Ready reports the failing settle")
	if err := relay.Ready(); !errors.Is(err, mensageria.ErrNotReady) || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Ready: %v; want the database's refusal", err)
	}
	// A claim may be under way as the failure is seen; every claim after
	// it began once the relay knew.
	known := len(obs.claimed()) + 1
	const probes = 4
	mensageriatest.Eventually(t, 60*time.Second, func() bool {
		n := 0
		for _, c := range obs.claimed()[min(known, len(obs.claimed())):] {
			if c > 0 {
				n++
			}
		}
		return n >= probes
	}, "the relay probes")
	claims := obs.claimed()
	full := 0
	for i, c := range claims {
		if i >= known && c > 1 {
			t.Fatalf("claim %d took %d rows while settles were failing; claims %v", i, c, claims)
		}
		if c > 1 {
			full++
		}
	}
	if full > inFlight {
		t.Fatalf("%d full claims before the relay backed off, want at most %d (one per batch slot); claims %v", full, inFlight, claims)
	}
	if got := rec.len(); got >= backlog {
		t.Fatalf("%d deliveries while settles failed: the backlog of %d went out again", got, backlog)
	}
	if n := obs.count(mensageria.OutcomeFenced); n != 0 {
		t.Fatalf("%d deliveries reported fenced; a refused settle is no fence", n)
	}
	if obs.count(mensageria.OutcomeUnsettled) == 0 {
		t.Fatal("no delivery was reported unsettled")
	}

	if err := b.exec("GRANT DELETE ON " + b.table("outbox") + " TO " + role); err != nil {
		t.Fatal(err)
	}
	mensageriatest.Eventually(t, 60*time.Second, func() bool {
		return b.count("SELECT count(*) FROM "+b.table("outbox")) == 0
	}, "the backlog drains")
	mensageriatest.Eventually(t, 10*time.Second, func() bool { return relay.Ready() == nil }, "Ready is nil again")
	if got := len(rec.keys()); got != backlog {
		t.Fatalf("%d keys delivered, want %d", got, backlog)
	}
	if n := obs.count(mensageria.OutcomeFenced); n != 0 {
		t.Fatalf("%d deliveries reported fenced", n)
	}
	out := lb.String()
	if n := strings.Count(out, "settle failed on a database error"); n != 1 {
		t.Fatalf("the failing streak was logged %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, "settles work again"); n != 1 {
		t.Fatalf("the recovery was logged %d times, want once:\n%s", n, out)
	}
}

// Ready is nil only while the relay runs.
func TestReadyFollowsTheRelay(t *testing.T) {
	b := sqliteBackend(t)
	c := newClient(t, b.open(), fastConfig(uniqueApp("ready"), mensageria.NewRegistry().MustRegister("t", &recorder{})))
	if err := c.Ready(); !errors.Is(err, mensageria.ErrNotReady) || !strings.Contains(err.Error(), "not started") {
		t.Fatalf("before Start: %v", err)
	}
	start(t, c)
	if err := c.Ready(); err != nil {
		t.Fatalf("running: %v", err)
	}
	if err := c.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(); !errors.Is(err, mensageria.ErrNotReady) || !strings.Contains(err.Error(), "stopped") {
		t.Fatalf("after Stop: %v", err)
	}
}
