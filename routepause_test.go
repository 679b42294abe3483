package mensageria

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria/driver"
)

// pauseScript answers RoutePauses with what an operator last set.
type pauseScript struct {
	mu     sync.Mutex
	paused []driver.RoutePause
	err    error
}

func (p *pauseScript) RoutePauses(_ context.Context, app string) ([]driver.RoutePause, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.paused), p.err
}

// Each read of the operators' pauses hands the routes the types paused: a
// paused type is not claimable (its ordered twin neither) and shows in the
// route's health with who and why; a resume makes it claimable again and
// wakes claiming; a failed read changes nothing; each change is logged
// once, not on every read.
func TestReadPausesFollowsTheOperators(t *testing.T) {
	reg := NewRegistry().MustRegister("a", &namedSender{"a"}).MustRegister("b", &namedSender{"b"})
	reg.MustRegister("c", &namedSender{"c"}, Ordered())
	var logs bytes.Buffer
	cfg := partConfig(t, reg, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	rts, _ := newRoutes(cfg, routeNames(cfg), time.Now())
	script := &pauseScript{}
	waker := &wakeCount{}
	m := &maintenance{cfg: cfg, rts: rts, pauses: script, waker: waker, types: reg.Types(), record: make(chan struct{}, 1)}
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
		if err := m.readPauses(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	since := time.Now().Add(-time.Minute)
	script.paused = []driver.RoutePause{
		{Type: "b", App: "parts", PausedBy: "cli:ana", Reason: "b's receiver upgrades until 14:00", PausedAt: since},
		{Type: "c", App: "parts", PausedBy: "console:ops", Reason: "maintenance", PausedAt: since},
	}
	read()
	read() // a second read of the same pauses changes and logs nothing more
	if types, ordered := claimable(); !slices.Equal(types, []string{"a"}) || len(ordered) != 0 {
		t.Fatalf("b and c paused, yet claimable types %v, ordered %v", types, ordered)
	}
	var got []OperatorPause
	for _, rt := range rts {
		got = append(got, rt.health().OperatorPaused...)
	}
	slices.SortFunc(got, func(x, y OperatorPause) int { return strings.Compare(x.Type, y.Type) })
	want := []OperatorPause{{Type: "b", By: "cli:ana", Reason: "b's receiver upgrades until 14:00", Since: since}, {Type: "c", By: "console:ops", Reason: "maintenance", Since: since}}
	if !slices.Equal(got, want) {
		t.Fatalf("routes report pauses %+v, want %+v", got, want)
	}
	if n := strings.Count(logs.String(), "an operator paused a type"); n != 2 || !strings.Contains(logs.String(), "paused_by=cli:ana") {
		t.Fatalf("%d pause lines logged, want 2 naming the operator:\n%s", n, logs.String())
	}
	if waker.n.Load() != 0 {
		t.Fatalf("a pause woke claiming %d times", waker.n.Load())
	}

	script.err = errors.New("connection refused")
	if err := m.readPauses(context.Background()); err == nil {
		t.Fatal("a failed read reported no error")
	}
	if types, _ := claimable(); !slices.Equal(types, []string{"a"}) {
		t.Fatalf("a failed read changed the claimable types to %v", types)
	}

	script.err, script.paused = nil, script.paused[1:] // b resumed
	read()
	if types, ordered := claimable(); !slices.Equal(types, []string{"a", "b"}) || len(ordered) != 0 || waker.n.Load() != 1 {
		t.Fatalf("b resumed: types %v, ordered %v, %d wake-ups", types, ordered, waker.n.Load())
	}
	if n := strings.Count(logs.String(), "an operator resumed a type"); n != 1 {
		t.Fatalf("%d resume lines logged, want 1:\n%s", n, logs.String())
	}
}
