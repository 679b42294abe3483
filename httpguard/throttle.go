// Package httpguard holds what the HTTP endpoints of mensageria (the
// receiver of transport/m2mhttp, the `mensageria receive` daemon and the
// web console) share to guard their door: the throttle of wrong
// credentials, its rate-limited log, and a router that answers the
// refusals Go's ServeMux would make itself (404, 405, the redirect of an
// unclean path) in the endpoint's own problem form. It is public, and
// versioned with the core module, because the daemon and the console
// live in the command's module.
package httpguard

import (
	"sync"
	"time"
)

// Throttle bounds wrong credentials: per source, a bucket of burst
// failures that refills at rate a second. With its bucket empty every
// credential from that source is refused (429) until it refills, so a
// guesser gets at most rate guesses a second there however many
// connections it opens. It counts failures only: a client that presents a
// right credential costs nothing.
//
// The console keys every request with "" (one bucket for the whole
// console: few operators, and a guesser is not to get a bucket per
// address); the receiver keys by the client's address, so that one sender
// stuck on a rotated-out token cannot make the others refused. At most
// MaxSources keys are kept: buckets that refilled are dropped first, and
// past the bound new sources share one bucket.
type Throttle struct {
	mu      sync.Mutex
	burst   float64
	rate    float64 // per second
	buckets map[string]*bucket
	// Now is the clock; time.Now unless a test sets it.
	Now func() time.Time
}

// MaxSources bounds the buckets a Throttle keeps, the shared one included.
const MaxSources = 4096

// overflow is the key of the bucket that sources past MaxSources share.
const overflow = "\x00overflow"

type bucket struct {
	tokens float64
	last   time.Time
}

// NewThrottle returns a throttle of burst failures refilling at rate a
// second.
func NewThrottle(burst int, rate float64) *Throttle {
	return &Throttle{burst: float64(burst), rate: rate, buckets: map[string]*bucket{}, Now: time.Now}
}

// bucketOf returns key's bucket refilled to now; the caller holds mu.
// create false returns nil for a source that has none (it failed nothing
// lately, so its bucket would be full).
func (t *Throttle) bucketOf(key string, create bool) *bucket {
	now := t.Now()
	b, ok := t.buckets[key]
	if !ok {
		if !create {
			// A source with no bucket of its own may be one of those
			// that share the overflow bucket.
			if b = t.buckets[overflow]; b == nil {
				return nil
			}
		} else {
			// The overflow bucket counts in the bound.
			if len(t.buckets) >= MaxSources-1 {
				t.prune(now)
			}
			if len(t.buckets) >= MaxSources-1 {
				key = overflow
			}
			if b = t.buckets[key]; b == nil {
				b = &bucket{tokens: t.burst, last: now}
				t.buckets[key] = b
			}
		}
	}
	b.tokens = min(t.burst, b.tokens+now.Sub(b.last).Seconds()*t.rate)
	b.last = now
	return b
}

// prune drops the buckets that have refilled: their sources are as if
// they had never failed.
func (t *Throttle) prune(now time.Time) {
	for k, b := range t.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*t.rate >= t.burst {
			delete(t.buckets, k)
		}
	}
}

// Blocked reports whether credentials from key are refused for now, and
// for how long.
func (t *Throttle) Blocked(key string) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucketOf(key, false)
	if b == nil || b.tokens >= 1 {
		return 0, false
	}
	return time.Duration((1 - b.tokens) / t.rate * float64(time.Second)), true
}

// Failed spends one token of key's bucket.
func (t *Throttle) Failed(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucketOf(key, true)
	b.tokens = max(0, b.tokens-1)
}
