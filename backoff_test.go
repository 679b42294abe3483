package mensageria

import (
	"math/rand/v2"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestBackoffProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		base := time.Duration(rapid.Int64Range(1, int64(time.Minute)).Draw(t, "base"))
		maxD := base + time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "extra"))
		attempt := rapid.IntRange(-3, 200).Draw(t, "attempt")
		retryAfter := time.Duration(rapid.Int64Range(0, int64(2*time.Hour)).Draw(t, "retryAfter"))
		ceiling := time.Duration(rapid.Int64Range(int64(time.Second), int64(90*time.Minute)).Draw(t, "ceiling"))
		rng := rand.New(rand.NewPCG(rapid.Uint64().Draw(t, "seed"), 1))

		d := backoff(attempt, base, maxD, retryAfter, ceiling, rng)

		// The exponential ceiling of this attempt, capped.
		ceil := base
		for i := 1; i < attempt && ceil < maxD; i++ {
			ceil *= 2
		}
		if ceil > maxD {
			ceil = maxD
		}
		// A Retry-After is a lower bound above maxD too, up to the
		// ceiling; without one the backoff stays under maxD.
		if d <= 0 || d > max(maxD, min(retryAfter, ceiling)) {
			t.Fatalf("delay %s outside (0, max(%s, min(%s, %s))]", d, maxD, retryAfter, ceiling)
		}
		if d < min(retryAfter, ceiling) {
			t.Fatalf("delay %s shorter than the Retry-After %s the destination asked for (ceiling %s)", d, retryAfter, ceiling)
		}
		if retryAfter == 0 && d > maxD {
			t.Fatalf("delay %s above BackoffMax %s with no Retry-After", d, maxD)
		}
		if retryAfter == 0 && (d < ceil/2 || d > ceil) {
			t.Fatalf("attempt %d: delay %s outside the jitter band [%s, %s]", attempt, d, ceil/2, ceil)
		}
	})
}

// The upper bound never shrinks as attempts grow, so a failing destination
// is never retried faster than before.
func TestBackoffCeilingIsMonotonic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		base := time.Duration(rapid.Int64Range(1, int64(time.Second)).Draw(t, "base"))
		maxD := base * time.Duration(rapid.Int64Range(1, 10000).Draw(t, "factor"))
		a := rapid.IntRange(1, 100).Draw(t, "attempt")
		hi := func(attempt int) time.Duration {
			// With a generator that always draws the top of the band.
			return backoff(attempt, base, maxD, 0, time.Hour, rand.New(constSource{}))
		}
		if hi(a+1) < hi(a) {
			t.Fatalf("ceiling shrank from attempt %d (%s) to %d (%s)", a, hi(a), a+1, hi(a+1))
		}
	})
}

type constSource struct{}

func (constSource) Uint64() uint64 { return ^uint64(0) }
