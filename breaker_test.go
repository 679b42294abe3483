package mensageria

import (
	"errors"
	"testing"
	"time"
)

// The breaker keeps no clock: these tests hand it one that only moves
// when they say.

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func testBreaker() breaker {
	return newBreaker(breakerConfig{threshold: 3, pause: time.Second, pauseMax: 4 * time.Second, ceiling: time.Hour}, t0)
}

func wantState(t *testing.T, b *breaker, st RouteState, until time.Time) {
	t.Helper()
	if b.state != st || !b.until.Equal(until) {
		t.Fatalf("state %s until %s, want %s until %s", b.state, b.until.Format(time.TimeOnly), st, until.Format(time.TimeOnly))
	}
}

func TestBreakerPausesAtTheThresholdAndProbes(t *testing.T) {
	b := testBreaker()
	now := t0
	for i := 1; i < 3; i++ {
		if c := b.fail(now, "503", 0); c != nil {
			t.Fatalf("failure %d of a threshold of 3 changed the state: %+v", i, c)
		}
	}
	// An answer in between starts the count again.
	b.answer(now)
	b.fail(now, "503", 0)
	b.fail(now, "503", 0)
	wantState(t, &b, RouteFlowing, time.Time{})
	c := b.fail(now, "http 503", 0)
	if c == nil || c.from != RouteFlowing || c.to != RoutePaused {
		t.Fatalf("third failure in a row: %+v", c)
	}
	wantState(t, &b, RoutePaused, now.Add(time.Second))
	if b.lastErr != "http 503" || b.failures != 3 {
		t.Fatalf("lastErr %q failures %d", b.lastErr, b.failures)
	}
	// Not before the pause is over.
	if c := b.probe(now.Add(999 * time.Millisecond)); c != nil {
		t.Fatalf("probe before the pause ended: %+v", c)
	}
	now = now.Add(time.Second)
	if c := b.probe(now); c == nil || c.to != RouteProbing {
		t.Fatalf("probe at the end of the pause: %+v", c)
	}
	// Failed probes double the pause, up to its maximum.
	for _, want := range []time.Duration{2 * time.Second, 4 * time.Second, 4 * time.Second} {
		if c := b.fail(now, "still 503", 0); c == nil || c.from != RouteProbing || c.to != RoutePaused {
			t.Fatalf("failed probe: %+v", c)
		}
		wantState(t, &b, RoutePaused, now.Add(want))
		now = now.Add(want)
		b.probe(now)
	}
	// The destination answers the probe: flowing, and the next outage
	// starts from the first pause again.
	if c := b.answer(now); c == nil || c.from != RouteProbing || c.to != RouteFlowing {
		t.Fatalf("answered probe: %+v", c)
	}
	if b.failures != 0 || b.level != 0 || b.lastErr != "" || !b.since.Equal(now) {
		t.Fatalf("after recovery: %+v", b)
	}
	for range 3 {
		b.fail(now, "503", 0)
	}
	wantState(t, &b, RoutePaused, now.Add(time.Second))
}

func TestBreakerRetryAfterIsALowerBound(t *testing.T) {
	b := testBreaker()
	// One Retry-After pauses a flowing route at once, until that instant,
	// above the pause maximum.
	c := b.fail(t0, "429", 30*time.Second)
	if c == nil || c.to != RoutePaused || !b.retryReq {
		t.Fatalf("429 with Retry-After: %+v", c)
	}
	wantState(t, &b, RoutePaused, t0.Add(30*time.Second))
	// A later, shorter one does not shorten it; a longer one extends it.
	b.fail(t0.Add(time.Second), "429", 5*time.Second)
	wantState(t, &b, RoutePaused, t0.Add(30*time.Second))
	b.fail(t0.Add(time.Second), "429", time.Minute)
	wantState(t, &b, RoutePaused, t0.Add(61*time.Second))
	// Bounded by the ceiling.
	b.fail(t0.Add(2*time.Second), "429", 48*time.Hour)
	wantState(t, &b, RoutePaused, t0.Add(2*time.Second+time.Hour))
	// A failed probe pauses at least as long as its Retry-After says.
	now := t0.Add(2*time.Second + time.Hour)
	b.probe(now)
	b.fail(now, "503", 10*time.Second)
	wantState(t, &b, RoutePaused, now.Add(10*time.Second))
	// Without one, a failed probe's pause is the doubled one.
	now = now.Add(10 * time.Second)
	b.probe(now)
	b.fail(now, "503", 0)
	wantState(t, &b, RoutePaused, now.Add(4*time.Second))
}

func TestBreakerStragglerAnswerWhilePaused(t *testing.T) {
	b := testBreaker()
	for range 3 {
		b.fail(t0, "503", 0)
	}
	// An answer to a request sent before the pause does not resume the
	// route; the probe decides.
	if c := b.answer(t0); c != nil || b.state != RoutePaused {
		t.Fatalf("straggler's answer while paused: %+v, state %s", c, b.state)
	}
}

func TestBreakerPostpone(t *testing.T) {
	b := testBreaker()
	backoffOf := func(n int, ra time.Duration) time.Duration {
		return max(time.Duration(n)*100*time.Millisecond, ra)
	}
	// Flowing, below the threshold: a backoff by the failures in a row.
	b.fail(t0, "503", 0)
	b.fail(t0, "503", 0)
	if d := b.postpone(t0, 0, backoffOf); d != 200*time.Millisecond {
		t.Fatalf("postpone while flowing: %s", d)
	}
	// Paused: until the probe, or the Retry-After if later.
	b.fail(t0, "503", 0)
	if d := b.postpone(t0.Add(300*time.Millisecond), 0, backoffOf); d != 700*time.Millisecond {
		t.Fatalf("postpone while paused: %s, want the rest of the pause", d)
	}
	if d := b.postpone(t0, 2*time.Hour, backoffOf); d != time.Hour {
		t.Fatalf("postpone with a Retry-After above the ceiling: %s, want the ceiling", d)
	}
	// Probing: the first pause, at least.
	b.probe(t0.Add(time.Second))
	if d := b.postpone(t0.Add(time.Second), 0, backoffOf); d != time.Second {
		t.Fatalf("postpone while probing: %s", d)
	}
}

func TestPacerSpacesAndSavesNothing(t *testing.T) {
	p := newPacer(10) // 100ms apart
	first, last := p.take(t0, 3)
	if !first.Equal(t0) || !last.Equal(t0.Add(200*time.Millisecond)) {
		t.Fatalf("first three slots: %s .. %s", first, last)
	}
	if w := p.wait(t0); w != 300*time.Millisecond {
		t.Fatalf("wait after three slots: %s", w)
	}
	// A slot left unused is not saved up: after an idle minute the next
	// slot is now, and the one after it 100ms later, not a burst.
	later := t0.Add(time.Minute)
	if f, _ := p.take(later, 1); !f.Equal(later) {
		t.Fatalf("after idling: %s", f)
	}
	if f, _ := p.take(later, 1); !f.Equal(later.Add(100 * time.Millisecond)) {
		t.Fatalf("second slot after idling: %s", f)
	}
	if n := newPacer(20).claimSize(500); n != 2 {
		t.Fatalf("claim size at 20/s: %d, want a tenth of a second's worth", n)
	}
	if n := newPacer(0.5).claimSize(500); n != 1 {
		t.Fatalf("claim size at 0.5/s: %d, want 1", n)
	}
	if n := newPacer(1e6).claimSize(500); n != 500 {
		t.Fatalf("claim size at 1e6/s: %d, want the batch size", n)
	}
}

func TestFlowControlConfig(t *testing.T) {
	c, err := (&Config{App: "a"}).withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if c.RouteFailureThreshold != DefaultRouteFailureThreshold || c.RoutePause != DefaultRoutePause ||
		c.RoutePauseMax != DefaultRoutePauseMax || c.RetryAfterCeiling != DefaultRetryAfterCeiling {
		t.Fatalf("defaults: %+v", c)
	}
	for field, cfg := range map[string]*Config{
		"RetryAfterCeiling":     {App: "a", RetryAfterCeiling: time.Millisecond},
		"RouteFailureThreshold": {App: "a", RouteFailureThreshold: -1},
		"RoutePause":            {App: "a", RoutePause: -time.Second},
		"RoutePauseMax":         {App: "a", RoutePause: time.Minute, RoutePauseMax: time.Second},
	} {
		_, err := cfg.withDefaults()
		var ce *ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("%s: want a *ConfigError naming it, got %v", field, err)
		}
	}
	// A hook that only watches routes is a hook.
	if _, err := (&Config{App: "a", Hooks: []Hook{routeHookOnly{}}}).withDefaults(); err != nil {
		t.Fatalf("an OnRouteState hook refused: %v", err)
	}
}

type routeHookOnly struct{}

func (routeHookOnly) OnRouteState(RouteEvent) {}
