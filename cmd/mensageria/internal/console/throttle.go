package console

import (
	"sync"
	"time"
)

// throttle bounds failed logins (and refused credentials in a header) for
// the whole console: a bucket of burst failures that refills at rate a
// second. With the bucket empty every credential is refused with 429
// until it refills, so a guesser gets at most rate guesses a second
// however many connections it opens. It counts failures only: an operator
// who logs in right costs nothing.
type throttle struct {
	mu     sync.Mutex
	burst  float64
	rate   float64 // per second
	tokens float64
	last   time.Time
	now    func() time.Time
}

func newThrottle(burst int, rate float64) *throttle {
	return &throttle{burst: float64(burst), rate: rate, tokens: float64(burst), now: time.Now}
}

func (t *throttle) refill() {
	now := t.now()
	if !t.last.IsZero() {
		t.tokens = min(t.burst, t.tokens+now.Sub(t.last).Seconds()*t.rate)
	}
	t.last = now
}

// blocked reports whether credentials are refused for now, and for how
// long.
func (t *throttle) blocked() (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refill()
	if t.tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - t.tokens) / t.rate * float64(time.Second)), true
}

// failed spends one token.
func (t *throttle) failed() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refill()
	t.tokens = max(0, t.tokens-1)
}
