package mensageria

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testsignal"
)

// leaderState is what the other parts of the relay ask of leadership.
type leaderState interface {
	isLeader() bool
	// fence is what a claim presents so that a deposed leader's claim
	// fails; nil without an election.
	fence() *driver.Fence
	// changes receives a value when leadership changed.
	changes() <-chan struct{}
}

// elector is what leadership needs of the driver's driver.Elector.
type elector interface {
	Acquire(ctx context.Context) (epoch int64, leader bool, err error)
	Release(ctx context.Context) error
}

// leadership holds the app's election for the relay: whether it leads,
// and the epoch that fences its claims. Without an election
// (ElectionNone) it always leads and fences nothing.
type leadership struct {
	app     string
	lease   time.Duration
	log     *slog.Logger
	elector elector // nil with ElectionNone
	hooks   []OnElection
	// failures logs a streak of failed rounds once and makes Ready fail
	// while it lasts.
	failures *failureHealth
	leader   atomic.Bool
	renewed  time.Time // when the last round this relay won began; run's goroutine only
	epoch    atomic.Int64
	changed  chan struct{}

	electedSignal testsignal.Signal[bool]
}

func newLeadership(cfg *Config, el elector, hooks []OnElection) *leadership {
	l := &leadership{app: cfg.App, lease: cfg.Lease, log: cfg.Logger, elector: el, hooks: hooks, changed: make(chan struct{}, 1)}
	if el == nil {
		l.leader.Store(true)
	}
	return l
}

func (l *leadership) isLeader() bool { return l.leader.Load() }

func (l *leadership) changes() <-chan struct{} { return l.changed }

func (l *leadership) fence() *driver.Fence {
	if l.elector == nil {
		return nil
	}
	return &driver.Fence{App: l.app, Epoch: l.epoch.Load()}
}

// run keeps calling Acquire at a third of the lease, until ctx ends:
// often enough that a live leader never loses its lease and a standby
// notices a vacancy soon.
func (l *leadership) run(ctx context.Context) {
	if l.elector == nil {
		return
	}
	tick := l.lease / 3
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		l.round(ctx, tick)
		t.Reset(tick)
	}
}

// round is one election round: an Acquire, and what changed.
func (l *leadership) round(ctx context.Context, timeout time.Duration) {
	if hr, ok := l.elector.(driver.HealthReporter); ok {
		// The leader's row carries why it is not ready, for 'mensageria
		// status'.
		hr.ReportHealth(l.failures.reason())
	}
	began := time.Now()
	actx, cancel := context.WithTimeout(ctx, timeout)
	epoch, ok, err := l.elector.Acquire(actx)
	cancel()
	switch {
	case err != nil && ctx.Err() == nil:
		// Not ready: the relay cannot hold or win its election (another
		// relay's winning is no error). A leader keeps leading while the
		// lease it last renewed surely runs (a third of it kept for the
		// clocks' drift): a round lost to a dropped connection is not a
		// lost election, and were it lost, the epoch fences its claims.
		l.failures.failed(FailureElection, err)
		ok = false
		if l.leader.Load() && time.Since(l.renewed) < l.lease*2/3 {
			ok, epoch = true, l.epoch.Load()
		}
	case err == nil:
		l.failures.succeeded(FailureElection)
		if ok {
			l.renewed = began
		}
	}
	if was := l.leader.Load(); was != ok || (ok && epoch != l.epoch.Load()) {
		l.epoch.Store(epoch)
		l.leader.Store(ok)
		l.log.Info("relay leadership changed", "app", l.app, "leader", ok, "epoch", epoch)
		for _, h := range l.hooks {
			h.OnElection(ElectionEvent{App: l.app, Leader: ok, Epoch: epoch})
		}
		signal(l.changed)
	}
	l.electedSignal.Signal(ok)
}

// release gives the election up, so a standby takes over at once rather
// than after the lease.
func (l *leadership) release() {
	if l.elector == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.elector.Release(ctx); err != nil {
		l.log.Warn("election release failed", "err", err)
	}
}
