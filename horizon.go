package mensageria

import (
	"math"
	"time"
)

// RetryHorizon is the longest a message of this client can keep being
// retried (RelaySettings.RetryHorizon): every backoff delay up to
// MaxAttempts plus a lease per attempt, from the effective config. Tools
// print it beside the dedup windows that must outlast it.
func (c *Client) RetryHorizon() time.Duration { return retryHorizon(&c.cfg) }

// retryHorizon is the worst-case time from a message's first attempt to
// its last: each attempt may run up to a lease and then waits its full
// backoff (jitter only shortens it). A figure too large for a Duration
// (an enormous MaxAttempts) saturates instead of wrapping around.
func retryHorizon(c *Config) time.Duration {
	const forever = time.Duration(math.MaxInt64)
	total := c.Lease
	delay := c.BackoffBase
	for a := 1; a < c.MaxAttempts; a++ {
		step := c.Lease + min(delay, c.BackoffMax)
		if delay <= 0 || delay >= c.BackoffMax {
			// Every attempt left costs the same: multiply rather than
			// loop, so a MaxAttempts in the millions costs nothing.
			n := time.Duration(c.MaxAttempts - a)
			if step > 0 && n > (forever-total)/step {
				return forever
			}
			return total + n*step
		}
		if total > forever-step {
			return forever
		}
		total += step
		if delay > c.BackoffMax/2 {
			delay = c.BackoffMax
		} else {
			delay *= 2
		}
	}
	return total
}
