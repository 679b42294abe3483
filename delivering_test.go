package mensageria

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
)

// outcomeSink is settling as delivering sees it: it takes the outcomes.
type outcomeSink struct {
	ds   []*Delivery
	outs []outcome
}

func (s *outcomeSink) settle(_ *claimed, ds []*Delivery, outs []outcome) { s.ds, s.outs = ds, outs }

func newTestDeliverer(t *testing.T, reg *Registry, maxAttempts int) (*deliverer, *outcomeSink, *routeLog) {
	t.Helper()
	cfg := partConfig(t, reg, func(c *Config) { c.MaxAttempts = maxAttempts })
	_, routeOf := newRoutes(cfg, routeNames(cfg), time.Now())
	sink, routes := &outcomeSink{}, &routeLog{}
	d := &deliverer{cfg: cfg, runCtx: context.Background(), routeOf: routeOf, settles: sink, routeEvents: routes,
		jitter: newJitter(), sem: make(chan struct{}, 4)}
	d.deliveredSignal.Init()
	return d, sink, routes
}

// Delivering alone: each Sender's result becomes its outcome, and the
// batch goes to settling whole.
func TestDeliveringClassifiesEachResult(t *testing.T) {
	reg := NewRegistry().
		MustRegister("ok", okSender).
		MustRegister("refused", SenderFunc(func(context.Context, *Delivery) error { return Permanent(errors.New("422")) })).
		MustRegister("flaky", SenderFunc(func(context.Context, *Delivery) error { return errors.New("timeout") }))
	d, sink, _ := newTestDeliverer(t, reg, 3)
	b := &claimed{token: 1, deadline: time.Now().Add(time.Minute), leaseEnd: time.Now().Add(time.Minute), jobs: []driver.Job{
		{ID: 1, Type: "ok", Attempt: 1},
		{ID: 2, Type: "refused", Attempt: 1},
		{ID: 3, Type: "flaky", Attempt: 1},
		{ID: 4, Type: "flaky", Attempt: 3},
		{ID: 5, Type: "gone", Attempt: 1}, // no longer registered
	}}
	d.deliver(b)
	if n := d.deliveredSignal.WaitOrTimeout(t); n != 5 {
		t.Fatalf("delivered signal %d; want 5", n)
	}
	want := []Outcome{OutcomeDelivered, OutcomeDead, OutcomeRetry, OutcomeDead, ""}
	if len(sink.outs) != len(want) {
		t.Fatalf("%d outcomes settled; want %d", len(sink.outs), len(want))
	}
	for i, w := range want {
		if got := sink.outs[i].kind; got != w {
			t.Errorf("job %d (%s, attempt %d): outcome %q; want %q (err %v)", b.jobs[i].ID, b.jobs[i].Type, b.jobs[i].Attempt, got, w, sink.outs[i].err)
		}
	}
	if o := sink.outs[2]; o.delay <= 0 {
		t.Errorf("a retry without a delay: %+v", o)
	}
}

// A destination that fails while it answers nothing else pauses its
// route after the threshold; its messages wait uncounted, and the
// route's move is reported.
func TestDeliveringPausesAFailingRoute(t *testing.T) {
	down := SenderFunc(func(context.Context, *Delivery) error { return Unavailable(errors.New("503")) })
	reg := NewRegistry().MustRegister("down", down)
	d, sink, routes := newTestDeliverer(t, reg, 20)
	d.cfg.RouteFailureThreshold = 1
	_, d.routeOf = newRoutes(d.cfg, routeNames(d.cfg), time.Now())
	b := &claimed{deadline: time.Now().Add(time.Minute), jobs: []driver.Job{{ID: 1, Type: "down", Attempt: 1}}}
	d.deliver(b)
	if got := sink.outs[0].kind; got != OutcomePostponed {
		t.Fatalf("outcome %q; want postponed", got)
	}
	if got := routes.all(); len(got) != 1 || got[0] != RoutePaused {
		t.Fatalf("route moves %v; want one to paused", got)
	}
	// The next batch of a paused route is held back unsent.
	d.deliver(&claimed{deadline: time.Now().Add(time.Minute), jobs: []driver.Job{{ID: 2, Type: "down", Attempt: 1}}})
	if o := sink.outs[0]; o.kind != OutcomePostponed || !o.unsent {
		t.Fatalf("a paused route's message: %+v; want postponed unsent", o)
	}
}
