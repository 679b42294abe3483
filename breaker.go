package mensageria

import "time"

// RouteState is the state of a route's circuit breaker.
type RouteState string

// The states of a route (a breaker's closed, open and half-open).
const (
	// RouteFlowing: the route is claimed and delivered as usual.
	RouteFlowing RouteState = "flowing"
	// RoutePaused: the destination kept failing (or asked for time with a
	// Retry-After); the route's types are left out of claims until
	// RouteHealth.Until, when one probe message is tried.
	RoutePaused RouteState = "paused"
	// RouteProbing: the pause is over; one message at a time is tried,
	// and the first one the destination answers resumes the route.
	RouteProbing RouteState = "probing"
)

// breakerConfig is the part of Config a breaker follows.
type breakerConfig struct {
	threshold int
	pause     time.Duration
	pauseMax  time.Duration
	ceiling   time.Duration // of a Retry-After
}

// breaker is the state machine of one route's flow control. It keeps no
// clock: every call says what time it is, so tests drive it with a fake
// one. It is not safe for concurrent use; the route guards it.
type breaker struct {
	cfg      breakerConfig
	state    RouteState
	since    time.Time
	until    time.Time // paused: when the probe is due
	failures int       // destination-level failures in a row
	level    int       // failed probes of the current outage
	lastErr  string
	answered uint64 // answers the destination gave (deliveries and refusals)
	retryReq bool   // the current pause was asked for by a Retry-After
}

func newBreaker(cfg breakerConfig, now time.Time) breaker {
	return breaker{cfg: cfg, state: RouteFlowing, since: now}
}

// change is one transition of a breaker, for the logs, hooks and records.
type change struct {
	from, to RouteState
}

func (b *breaker) set(now time.Time, to RouteState) *change {
	if b.state == to {
		return nil
	}
	c := &change{from: b.state, to: to}
	b.state, b.since = to, now
	if to != RoutePaused {
		b.until = time.Time{}
	}
	return c
}

// answer records that the destination answered (a delivery, or a refusal
// of the message itself): the route works, whatever it said.
func (b *breaker) answer(now time.Time) *change {
	b.answered++
	b.failures = 0
	if b.state != RouteProbing {
		// A straggler's answer while paused started before the pause;
		// the probe decides.
		return nil
	}
	b.level, b.lastErr, b.retryReq = 0, "", false
	return b.set(now, RouteFlowing)
}

// fail records a destination-level failure (an error marked Unavailable)
// and the delay the destination asked for, if any (0: none).
func (b *breaker) fail(now time.Time, errText string, retryAfter time.Duration) *change {
	b.failures++
	b.lastErr = errText
	ra := min(max(retryAfter, 0), b.cfg.ceiling)
	var c *change
	switch b.state {
	case RouteFlowing:
		if retryAfter <= 0 && b.failures < b.cfg.threshold {
			return nil
		}
		b.level = 0
		c = b.set(now, RoutePaused)
		b.until = now.Add(b.cfg.pause)
		b.retryReq = false
		if retryAfter > 0 {
			// The destination said when: that, not the pause, is when
			// to try again.
			b.until = now.Add(ra)
			b.retryReq = true
		}
		return c
	case RouteProbing:
		b.level++
		c = b.set(now, RoutePaused)
		b.until = now.Add(b.pauseOf(b.level))
		b.retryReq = false
	}
	// Paused (already, or again): a Retry-After is a lower bound.
	if retryAfter > 0 && now.Add(ra).After(b.until) {
		b.until = now.Add(ra)
		b.retryReq = true
	}
	return c
}

// pauseOf is the pause after n failed probes: RoutePause doubled n times,
// capped at RoutePauseMax.
func (b *breaker) pauseOf(n int) time.Duration {
	d := b.cfg.pause
	for i := 0; i < n && d < b.cfg.pauseMax; i++ {
		if d > b.cfg.pauseMax/2 {
			return b.cfg.pauseMax // doubling would pass it, or wrap around
		}
		d *= 2
	}
	return min(d, b.cfg.pauseMax)
}

// probe moves a paused route whose pause is over to probing.
func (b *breaker) probe(now time.Time) *change {
	if b.state != RoutePaused || now.Before(b.until) {
		return nil
	}
	return b.set(now, RouteProbing)
}

// postpone is how long a message that failed on this route (or was not
// sent because the route is not flowing) waits, its attempt uncounted:
// until the probe while paused, at least the destination's Retry-After,
// and otherwise a backoff by the route's failures in a row.
func (b *breaker) postpone(now time.Time, retryAfter time.Duration, backoffOf func(n int, ra time.Duration) time.Duration) time.Duration {
	ra := min(max(retryAfter, 0), b.cfg.ceiling)
	switch b.state {
	case RoutePaused:
		return max(b.until.Sub(now), ra)
	case RouteProbing:
		return max(b.cfg.pause, ra)
	}
	return backoffOf(max(b.failures, 1), ra)
}
