package mensageria

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testsignal"
)

// queueDriver hands out its jobs to claims, recording each claim's
// parameters and whether the relay led when it claimed.
type queueDriver struct {
	mu     sync.Mutex
	jobs   []driver.Job
	claims []driver.ClaimParams
	lead   *fakeLeader
	led    []bool
}

func (q *queueDriver) Claim(_ context.Context, p driver.ClaimParams) ([]driver.Job, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.claims = append(q.claims, p)
	q.led = append(q.led, q.lead.leader.Load())
	n := min(p.Limit, len(q.jobs))
	out := q.jobs[:n]
	q.jobs = q.jobs[n:]
	return out, nil
}

func (q *queueDriver) Listen(context.Context) (driver.Listener, error) {
	return nil, driver.ErrNotSupported
}

// batchSink is delivering as claiming sees it: it takes the batches.
type batchSink chan *claimed

func (s batchSink) deliver(b *claimed) { s <- b }

// streak is a settle failure streak as claiming sees it.
type streak bool

func (s streak) probe() (int, bool) { return 0, bool(s) }

func newTestClaimer(t *testing.T, drv *queueDriver, lead *fakeLeader, health settleProber) (*claimer, batchSink, chan struct{}) {
	t.Helper()
	reg := NewRegistry().MustRegister("t", okSender)
	cfg := partConfig(t, reg, func(c *Config) {
		c.PollInterval = 5 * time.Millisecond
		c.BatchSize = 10
		c.BackoffBase = time.Millisecond
		c.PollOnly = true
	})
	rts, _ := newRoutes(cfg, routeNames(cfg), time.Now())
	sink := make(batchSink, 10)
	stop := make(chan struct{})
	c := &claimer{cfg: cfg, drv: drv, runCtx: context.Background(), stopping: stop, lead: lead, health: health,
		deliveries: sink, routeEvents: &routeLog{}, tokens: fixedTokens(42), types: reg.Types(), order: reg.orderedTypes(), rts: rts,
		wake: make(chan struct{}, 1), slots: make(chan struct{}, cfg.BatchesInFlight)}
	c.claimedSignal.Init()
	return c, sink, stop
}

func jobsOf(typ string, n int) []driver.Job {
	out := make([]driver.Job, n)
	for i := range out {
		out[i] = driver.Job{ID: int64(i + 1), Type: typ, Key: "k", Attempt: 1}
	}
	return out
}

// Claiming alone: a standby claims nothing; once it leads, it claims
// under its fence and token and hands the batch to delivering.
func TestClaimingClaimsOnlyWhileLeading(t *testing.T) {
	lead := newFakeLeader(false)
	lead.asked = make(chan bool, 100)
	drv := &queueDriver{jobs: jobsOf("t", 3), lead: lead}
	c, sink, stop := newTestClaimer(t, drv, lead, streak(false))
	var bg sync.WaitGroup
	done := make(chan struct{})
	go func() { defer close(done); c.run(&bg) }()

	for range 3 { // three looks as a standby
		if testsignal.Receive(t, lead.asked) {
			t.Fatal("the fake leader said it leads")
		}
	}
	lead.lead()
	claim := c.claimedSignal.WaitOrTimeout(t)
	if claim.Rows != 3 || claim.Err != nil {
		t.Fatalf("first claim as leader: %+v; want the 3 rows", claim)
	}
	b := testsignal.Receive(t, sink)
	close(stop)
	<-done

	if len(b.jobs) != 3 || b.token != 42 || !b.deadline.Before(b.leaseEnd) {
		t.Fatalf("batch handed over: %d jobs, token %d, deadline %v lease end %v", len(b.jobs), b.token, b.deadline, b.leaseEnd)
	}
	drv.mu.Lock()
	defer drv.mu.Unlock()
	for i, led := range drv.led {
		if !led {
			t.Fatalf("claim %d was made as a standby", i)
		}
	}
	if p := drv.claims[0]; p.Fence == nil || p.Fence.Epoch != 3 || p.Token != 42 || p.Limit != 10 {
		t.Fatalf("claim parameters %+v; want fenced at epoch 3, token 42, limit 10", p)
	}
}

// While settles fail, claiming takes one row at a time.
func TestClaimingProbesOneRowWhileSettlesFail(t *testing.T) {
	lead := newFakeLeader(true)
	drv := &queueDriver{jobs: jobsOf("t", 3), lead: lead}
	c, sink, stop := newTestClaimer(t, drv, lead, streak(true))
	var bg sync.WaitGroup
	done := make(chan struct{})
	go func() { defer close(done); c.run(&bg) }()
	for range 3 {
		if b := testsignal.Receive(t, sink); len(b.jobs) != 1 {
			t.Fatalf("a claim during a settle failure streak took %d rows; want 1", len(b.jobs))
		}
	}
	close(stop)
	<-done
}

// The deliveries' deadline leaves the settle a tenth of the lease, and
// half a second at least (a quarter of a lease under two seconds).
func TestLeasedKeepsASettleMargin(t *testing.T) {
	start := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct{ lease, margin time.Duration }{
		{time.Second, 250 * time.Millisecond},
		{2 * time.Second, 500 * time.Millisecond},
		{3 * time.Second, 500 * time.Millisecond},
		{5 * time.Second, 500 * time.Millisecond},
		{DefaultLease, DefaultLease / 10},
	} {
		b := leased(1, start, c.lease, nil)
		if got := b.leaseEnd.Sub(b.deadline); got != c.margin || !b.leaseEnd.Equal(start.Add(c.lease)) {
			t.Errorf("lease %v: deadline %v before the lease's end %v, want %v", c.lease, got, b.leaseEnd, c.margin)
		}
	}
}

// An enqueue within NotifyDebounce of the last notification carries none:
// after a claim that found rows, the main loop keeps looking for a
// debounce before it waits for a notification or the poll, so such a
// message is claimed within busyPoll, not at the next poll (an hour
// here). Once the debounce has run out the loop goes quiet.
func TestClaimingLingersForADebounceAfterRows(t *testing.T) {
	for _, tc := range []struct {
		name     string
		debounce time.Duration
	}{{"within the debounce", time.Hour}, {"after the debounce", 20 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			lead := newFakeLeader(true)
			drv := &queueDriver{jobs: jobsOf("t", 3), lead: lead}
			c, sink, stop := newTestClaimer(t, drv, lead, streak(false))
			c.cfg.PollInterval = time.Hour
			c.cfg.NotifyDebounce = tc.debounce
			var bg sync.WaitGroup
			done := make(chan struct{})
			go func() { defer close(done); c.run(&bg) }()
			defer func() { close(stop); <-done }()

			if claim := c.claimedSignal.WaitOrTimeout(t); claim.Rows != 3 {
				t.Fatalf("first claim: %+v; want the 3 rows", claim)
			}
			testsignal.Receive(t, sink)
			for c.claimedSignal.WaitOrTimeout(t).Rows != 0 {
			}
			if tc.debounce == time.Hour {
				// A row committed without a notification.
				drv.mu.Lock()
				drv.jobs = jobsOf("t", 1)
				drv.mu.Unlock()
				for c.claimedSignal.WaitOrTimeout(t).Rows == 0 {
				}
				testsignal.Receive(t, sink)
				return
			}
			// 20 ms of looks every busyPoll, then none until the poll.
			for range 1000 {
				if _, ok := c.claimedSignal.Wait(200 * time.Millisecond); !ok {
					return
				}
			}
			t.Fatal("the main loop kept claiming long after the debounce ran out")
		})
	}
}
