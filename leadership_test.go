package mensageria

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// scriptedElector answers Acquire from a script, repeating its last line.
type scriptedElector struct {
	mu       sync.Mutex
	script   []acquired
	released bool
}

type acquired struct {
	epoch  int64
	leader bool
	err    error
}

func (e *scriptedElector) Acquire(context.Context) (int64, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	a := e.script[0]
	if len(e.script) > 1 {
		e.script = e.script[1:]
	}
	return a.epoch, a.leader, a.err
}

func (e *scriptedElector) Release(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.released = true
	return nil
}

type electionLog struct{ events[ElectionEvent] }

func (l *electionLog) OnElection(ev ElectionEvent) { l.add(ev) }

// Leadership alone: it leads and fences with the epoch it won, a new
// epoch is a change, and election errors make it a standby once the lease
// it renewed last may have run out.
func TestLeadershipFollowsTheElection(t *testing.T) {
	el := &scriptedElector{script: []acquired{{epoch: 7, leader: true}, {epoch: 7, leader: true}, {epoch: 8, leader: true}, {err: errors.New("connection lost")}}}
	hooks := &electionLog{}
	l := newLeadership(partConfig(t, nil, nil), el, []OnElection{hooks})
	l.lease = 30 * time.Millisecond // rounds every 10ms
	l.electedSignal.Init()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); l.run(ctx) }()

	if !l.electedSignal.WaitOrTimeout(t) || !l.isLeader() || l.fence().Epoch != 7 {
		t.Fatalf("after the first round: leader %v, fence %+v; want leading at epoch 7", l.isLeader(), l.fence())
	}
	select {
	case <-l.changes():
	default:
		t.Fatal("winning the election did not signal a change")
	}
	l.electedSignal.WaitOrTimeout(t) // same epoch: no change
	l.electedSignal.WaitOrTimeout(t) // epoch 8
	if got := l.fence().Epoch; got != 8 {
		t.Fatalf("fence epoch %d after a new epoch; want 8", got)
	}
	// Failed rounds: it leads on while the lease it renewed last surely
	// runs (two thirds of it, 20ms: a round or two), then stands by.
	rounds := 0
	for l.electedSignal.WaitOrTimeout(t) {
		if rounds++; rounds > 3 {
			t.Fatal("election errors left it leading past its lease")
		}
	}
	if l.isLeader() {
		t.Fatal("an election error left it leading")
	}
	cancel()
	<-done
	l.release()

	want := []ElectionEvent{{App: "parts", Leader: true, Epoch: 7}, {App: "parts", Leader: true, Epoch: 8}, {App: "parts", Leader: false}}
	if got := hooks.all(); !slices.Equal(got, want) {
		t.Fatalf("election events %+v; want %+v", got, want)
	}
	if !el.released {
		t.Fatal("release did not release the election")
	}
}

// Without an election the relay always leads and fences nothing.
func TestLeadershipWithoutElection(t *testing.T) {
	l := newLeadership(partConfig(t, nil, nil), nil, nil)
	l.run(context.Background()) // returns at once
	l.release()
	if !l.isLeader() || l.fence() != nil {
		t.Fatalf("leader %v, fence %+v; want leading, unfenced", l.isLeader(), l.fence())
	}
}
