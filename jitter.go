package mensageria

import (
	"math/rand/v2"
	"sync"
	"time"
)

// jitter is the relay's one random source, shared by its parts: claim
// tokens and the backoff's jitter.
type jitter struct {
	mu  sync.Mutex
	rng *rand.Rand
}

func newJitter() *jitter {
	return &jitter{rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// token is a fresh lease token, which a settle must present.
func (j *jitter) token() int64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.rng.Int64()
}

// backoff is the jittered delay after n failures (see backoff).
func (j *jitter) backoff(cfg *Config, n int, retryAfter time.Duration) time.Duration {
	j.mu.Lock()
	defer j.mu.Unlock()
	return backoff(n, cfg.BackoffBase, cfg.BackoffMax, retryAfter, cfg.RetryAfterCeiling, j.rng)
}
