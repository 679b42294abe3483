package mensageria

import "time"

// RetryHorizon is the longest a message of this client can keep being
// retried (RelaySettings.RetryHorizon): every backoff delay up to
// MaxAttempts plus a lease per attempt, from the effective config. Tools
// print it beside the dedup windows that must outlast it.
func (c *Client) RetryHorizon() time.Duration { return retryHorizon(&c.cfg) }
