package mensageria

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
)

// flakySettle refuses the first failures settles, then settles every
// row, or fences those listed.
type flakySettle struct {
	mu       sync.Mutex
	failures int
	fenced   []int64
	calls    int
}

func (f *flakySettle) Settle(_ context.Context, p driver.SettleParams) (driver.SettleResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.calls <= f.failures {
		return driver.SettleResult{}, errors.New("database refused")
	}
	var res driver.SettleResult
	for _, ids := range [][]int64{p.Delivered, p.Release} {
		for _, id := range ids {
			if slices.Contains(f.fenced, id) {
				res.Fenced = append(res.Fenced, id)
			} else {
				res.Settled = append(res.Settled, id)
			}
		}
	}
	for _, r := range p.Retry {
		res.Settled = append(res.Settled, r.ID)
	}
	return res, nil
}

type deliveryLog struct{ events[DeliveryEvent] }

func (l *deliveryLog) OnDelivery(ev DeliveryEvent) { l.add(ev) }

func newTestSettler(t *testing.T, drv settleDriver, hooks *deliveryLog) *settler {
	t.Helper()
	cfg := partConfig(t, nil, func(c *Config) { c.Lease = time.Second })
	s := &settler{cfg: cfg, drv: drv, runCtx: context.Background(), routes: map[string]string{}, routeOf: map[string]*route{},
		onDelivery: []OnDelivery{hooks}, doubted: make(chan struct{}, 1)}
	s.settledSignal.Init()
	return s
}

func settleBatch(lease time.Duration, outs ...outcome) (*claimed, []*Delivery, []outcome) {
	b := &claimed{token: 9, leaseEnd: time.Now().Add(lease)}
	var ds []*Delivery
	for i := range outs {
		b.jobs = append(b.jobs, driver.Job{ID: int64(i + 1), Type: "t"})
		ds = append(ds, &Delivery{Type: "t", Attempt: 1})
	}
	return b, ds, outs
}

// Settling alone: refused settles are retried while the lease lasts,
// the streak shows in the health until one succeeds, and the recorded
// outcome is what the hooks see.
func TestSettlingRetriesWhileTheLeaseLasts(t *testing.T) {
	drv := &flakySettle{failures: 2, fenced: []int64{2}}
	hooks := &deliveryLog{}
	s := newTestSettler(t, drv, hooks)
	b, ds, outs := settleBatch(time.Minute, outcome{kind: OutcomeDelivered}, outcome{kind: OutcomeDelivered}, outcome{kind: OutcomeRetry, err: errors.New("x")})
	s.settle(b, ds, outs)
	if err := s.settledSignal.WaitOrTimeout(t); err != nil {
		t.Fatalf("settled signal %v; want the settle to succeed", err)
	}
	if drv.calls != 3 {
		t.Fatalf("%d settle calls; want 3 (two refused)", drv.calls)
	}
	if _, err := s.health.failing(); err != nil {
		t.Fatalf("health still failing after a settle succeeded: %v", err)
	}
	want := []Outcome{OutcomeDelivered, OutcomeFenced, OutcomeRetry}
	got := hooks.all()
	if len(got) != len(want) {
		t.Fatalf("%d delivery events; want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Outcome != w {
			t.Errorf("event %d: %s; want %s", i, got[i].Outcome, w)
		}
	}
}

// A settle refused until the lease runs out leaves the outcomes
// unsettled, the health failing and claiming probing.
func TestSettlingGivesUpAtTheLease(t *testing.T) {
	drv := &flakySettle{failures: 1 << 30}
	hooks := &deliveryLog{}
	s := newTestSettler(t, drv, hooks)
	b, ds, outs := settleBatch(300*time.Millisecond, outcome{kind: OutcomeDelivered})
	s.settle(b, ds, outs)
	if err := s.settledSignal.WaitOrTimeout(t); err == nil {
		t.Fatal("settled signal nil; want the settle's error")
	}
	if since, err := s.health.failing(); err == nil || since.IsZero() {
		t.Fatal("health not failing after the settle gave up")
	}
	if _, probing := s.health.probe(); !probing {
		t.Fatal("claiming would not probe during the streak")
	}
	if got := hooks.all(); len(got) != 1 || got[0].Outcome != OutcomeUnsettled {
		t.Fatalf("events %+v; want one unsettled", got)
	}
}
