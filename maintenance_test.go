package mensageria

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
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

// A standby purges nothing.
func TestPurgeOnlyOnTheLeader(t *testing.T) {
	lead := newFakeLeader(false)
	lead.asked = make(chan bool, 100)
	drv := &purgeScript{}
	m, cancel := newTestMaintenance(t, drv, lead)
	done := make(chan struct{})
	go func() { defer close(done); m.purge() }()
	for range 3 { // three purge intervals as a standby
		waitFor(t, lead.asked)
	}
	cancel()
	<-done
	drv.mu.Lock()
	defer drv.mu.Unlock()
	if len(drv.calls) != 0 {
		t.Fatalf("a standby purged %d times", len(drv.calls))
	}
}
