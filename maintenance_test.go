package mensageria

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testsignal"
)

// purgeScript answers purges from a script, then with nothing purged.
type purgeScript struct {
	mu     sync.Mutex
	script []driver.PurgeResult
	calls  []driver.PurgeParams
}

func (p *purgeScript) Purge(_ context.Context, pp driver.PurgeParams) (driver.PurgeResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, pp)
	if len(p.script) == 0 {
		return driver.PurgeResult{}, nil
	}
	r := p.script[0]
	p.script = p.script[1:]
	return r, nil
}

func (p *purgeScript) SetRouteStates(context.Context, driver.RouteStatesParams) error { return nil }

func newTestMaintenance(t *testing.T, drv maintenanceDriver, lead leaderState) (*maintenance, context.CancelFunc) {
	t.Helper()
	cfg := partConfig(t, nil, func(c *Config) { c.PurgeInterval = 5 * time.Millisecond; c.DeliveredRetention = time.Hour })
	ctx, cancel := context.WithCancel(context.Background())
	m := &maintenance{cfg: cfg, drv: drv, runCtx: ctx, stopping: make(chan struct{}), lead: lead, types: []string{"t"}}
	m.purgedSignal.Init()
	return m, cancel
}

// Maintenance alone: the leader purges a batch at a time until one is
// not full.
func TestPurgeDrainsFullBatches(t *testing.T) {
	drv := &purgeScript{script: []driver.PurgeResult{{Outbox: purgeBatch}, {Inbox: purgeBatch}, {Outbox: 3}}}
	m, cancel := newTestMaintenance(t, drv, newFakeLeader(true))
	done := make(chan struct{})
	go func() { defer close(done); m.purge() }()
	for _, want := range []driver.PurgeResult{{Outbox: purgeBatch}, {Inbox: purgeBatch}, {Outbox: 3}} {
		if got := m.purgedSignal.WaitOrTimeout(t); got != want {
			t.Fatalf("purged %+v; want %+v", got, want)
		}
	}
	cancel()
	<-done
	drv.mu.Lock()
	defer drv.mu.Unlock()
	p := drv.calls[0]
	if p.App != "parts" || len(p.Types) != 1 || p.Types[0] != "t" || p.DeliveredBefore != time.Hour || p.Batch != purgeBatch {
		t.Fatalf("purge parameters %+v", p)
	}
}

// One pass goes on while any part of a batch is full, the applied inbox
// queue rows too: a backlog of those alone must not wait a purge interval
// per batch.
func TestPurgePassDrainsEachFullPart(t *testing.T) {
	drv := &purgeScript{script: []driver.PurgeResult{{Outbox: purgeBatch}, {Inbox: purgeBatch}, {InboxQueue: purgeBatch}, {Outbox: 3}}}
	m, cancel := newTestMaintenance(t, drv, newFakeLeader(true))
	defer cancel()
	m.purgeAll()
	drv.mu.Lock()
	defer drv.mu.Unlock()
	if len(drv.calls) != 4 || len(drv.script) != 0 {
		t.Fatalf("one pass made %d purges, %d scripted answers left; want 4 and 0", len(drv.calls), len(drv.script))
	}
}

// A standby purges nothing.
func TestPurgeOnlyOnTheLeader(t *testing.T) {
	lead := newFakeLeader(false)
	lead.asked = make(chan bool, 100)
	drv := &purgeScript{}
	m, cancel := newTestMaintenance(t, drv, lead)
	done := make(chan struct{})
	go func() { defer close(done); m.purge() }()
	for range 3 { // three purge intervals as a standby
		testsignal.Receive(t, lead.asked)
	}
	cancel()
	<-done
	drv.mu.Lock()
	defer drv.mu.Unlock()
	if len(drv.calls) != 0 {
		t.Fatalf("a standby purged %d times", len(drv.calls))
	}
}

// catalogScript answers Owners with the types the test gives the app.
type catalogScript struct {
	mu    sync.Mutex
	mine  []string
	other string // who owns the rest
	err   error
}

func (c *catalogScript) Owners(_ context.Context, app string) ([]driver.Ownership, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return nil, c.err
	}
	var out []driver.Ownership
	for _, t := range []string{"a", "b", "c"} {
		owner := c.other
		if slices.Contains(c.mine, t) {
			owner = "parts"
		}
		if app == "" || app == owner {
			out = append(out, driver.Ownership{Resource: driver.Resource{Kind: driver.ResourceType, Name: t}, App: owner})
		}
	}
	return out, nil
}

type namedSender struct{ name string }

func (*namedSender) Send(context.Context, *Delivery) error { return nil }

type wakeCount struct{ n atomic.Int32 }

func (w *wakeCount) wakeAll() { w.n.Add(1) }

// Each read of the catalog hands the routes the types it gives the app:
// one moved away is no longer claimable (and no longer purged or
// recorded), one given back is again; a change wakes claiming and asks for
// the routes' record to be replaced; a failed read changes nothing.
func TestReadOwnershipFollowsTheCatalog(t *testing.T) {
	reg := NewRegistry().MustRegister("a", &namedSender{"a"}).MustRegister("b", &namedSender{"b"})
	reg.MustRegister("c", &namedSender{"c"}, Ordered())
	cfg := partConfig(t, reg, nil)
	rts, _ := newRoutes(cfg, routeNames(cfg), time.Now())
	cat := &catalogScript{mine: []string{"a", "b", "c"}, other: "billing"}
	waker := &wakeCount{}
	m := &maintenance{cfg: cfg, rts: rts, owners: cat, waker: waker, types: reg.Types(), record: make(chan struct{}, 1)}
	claimable := func() (types, ordered []string) {
		for _, rt := range rts {
			t, o := rt.claimable()
			types, ordered = append(types, t...), append(ordered, o...)
		}
		slices.Sort(types)
		return types, ordered
	}
	read := func() {
		t.Helper()
		if err := m.readOwnership(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	read()
	if types, _ := claimable(); !slices.Equal(types, []string{"a", "b", "c"}) || waker.n.Load() != 0 || m.replaceRoutes.Load() {
		t.Fatalf("nothing moved, yet types %v, %d wake-ups, replace %v", types, waker.n.Load(), m.replaceRoutes.Load())
	}

	cat.mine = []string{"a"} // b and c moved to billing
	read()
	types, ordered := claimable()
	if !slices.Equal(types, []string{"a"}) || len(ordered) != 0 || !slices.Equal(m.purgeTypes(), []string{"a"}) {
		t.Fatalf("after the move: types %v, ordered %v, purged %v", types, ordered, m.purgeTypes())
	}
	if waker.n.Load() != 1 || !m.replaceRoutes.Load() {
		t.Fatalf("a move woke claiming %d times, replace %v", waker.n.Load(), m.replaceRoutes.Load())
	}
	var notOwned []string
	for _, rt := range rts {
		notOwned = append(notOwned, rt.health().NotOwned...)
	}
	slices.Sort(notOwned)
	if !slices.Equal(notOwned, []string{"b", "c"}) {
		t.Fatalf("routes report %v not owned", notOwned)
	}
	states, _ := m.changedRoutes(true)
	for _, s := range states {
		if s.Type != "a" {
			t.Fatalf("the record names %s, which billing's relay records now", s.Type)
		}
	}

	cat.err = errors.New("connection refused")
	if err := m.readOwnership(context.Background()); err == nil {
		t.Fatal("a failed read reported no error")
	}
	if types, _ := claimable(); !slices.Equal(types, []string{"a"}) {
		t.Fatalf("a failed read changed the types to %v", types)
	}

	cat.err, cat.mine = nil, []string{"a", "b", "c"}
	read()
	if types, ordered := claimable(); !slices.Equal(types, []string{"a", "b", "c"}) || !slices.Equal(ordered, []string{"c"}) || waker.n.Load() != 2 {
		t.Fatalf("given back: types %v, ordered %v, %d wake-ups", types, ordered, waker.n.Load())
	}
}

// purgeOnly is a driver whose only verb is its script's Purge.
type purgeOnly struct {
	driver.Driver
	s *purgeScript
}

func (d purgeOnly) Purge(ctx context.Context, p driver.PurgeParams) (driver.PurgeResult, error) {
	return d.s.Purge(ctx, p)
}

// PurgeInbox, for a process that receives without a relay: the app's
// inbox only (no types, so no outbox row), a batch at a time until
// neither the records nor the applied queue rows fill one, summed.
func TestPurgeInboxDrainsFullBatchesOfTheApp(t *testing.T) {
	s := &purgeScript{script: []driver.PurgeResult{{Inbox: purgeBatch}, {InboxQueue: purgeBatch}, {Inbox: 3, InboxQueue: 2}}}
	c, err := New(purgeOnly{s: s}, partConfig(t, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	records, applied, err := c.PurgeInbox(context.Background())
	if err != nil || records != purgeBatch+3 || applied != purgeBatch+2 {
		t.Fatalf("PurgeInbox = %d, %d, %v; want %d, %d, nil", records, applied, err, purgeBatch+3, purgeBatch+2)
	}
	want := driver.PurgeParams{App: "parts", Batch: purgeBatch}
	if len(s.calls) != 3 {
		t.Fatalf("%d purges; want 3", len(s.calls))
	}
	for _, p := range s.calls {
		if p.App != want.App || p.Batch != want.Batch || len(p.Types) != 0 || p.DeliveredBefore != 0 {
			t.Fatalf("purged with %+v; want %+v", p, want)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := c.PurgeInbox(ctx); !errors.Is(err, context.Canceled) || len(s.calls) != 3 {
		t.Fatalf("PurgeInbox on an ended context = %v after %d purges; want context.Canceled and none", err, len(s.calls))
	}
}
