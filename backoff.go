package mensageria

import (
	"math/rand/v2"
	"time"
)

// backoff returns the delay before the next attempt after `attempt` failed
// ones: base·2^(attempt-1) capped at maxD, then "equal jitter" (a uniform
// draw from the upper half) so that a burst of failures does not retry in
// lockstep. A destination's Retry-After raises the delay, above maxD too:
// it is a lower bound the destination set, bounded only by ceiling.
func backoff(attempt int, base, maxD, retryAfter, ceiling time.Duration, r *rand.Rand) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt && d < maxD; i++ {
		d *= 2
	}
	if d > maxD || d <= 0 {
		d = maxD
	}
	if half := d / 2; half > 0 {
		d = half + time.Duration(r.Int64N(int64(d-half)+1))
	}
	if retryAfter > d {
		d = min(retryAfter, max(ceiling, d))
	}
	return d
}
