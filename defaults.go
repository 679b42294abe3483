package mensageria

import (
	"math"
	"time"
)

// The defaults of Config, exported so that transports, tools and docs take
// their figures from here instead of restating them.
const (
	DefaultBatchSize       = 500
	DefaultConcurrency     = 16
	DefaultBatchesInFlight = 2
	DefaultLease           = 30 * time.Second
	DefaultMaxAttempts     = 20
	DefaultBackoffBase     = time.Second
	DefaultBackoffMax      = 10 * time.Minute
	DefaultPollInterval    = time.Second
	DefaultNotifyDebounce  = 10 * time.Millisecond
	DefaultPurgeInterval   = time.Minute
	// DefaultReconcileInterval is Config.ReconcileInterval's default.
	DefaultReconcileInterval = 10 * time.Second
	// DefaultRouteFailureThreshold is how many destination-level failures
	// in a row (Unavailable) pause a route.
	DefaultRouteFailureThreshold = 5
	// DefaultRoutePause is a route's first pause; each failed probe
	// doubles it, up to DefaultRoutePauseMax.
	DefaultRoutePause    = time.Second
	DefaultRoutePauseMax = time.Minute
	// DefaultRetryAfterCeiling bounds a destination's Retry-After: honoured
	// as a lower bound up to this, even above BackoffMax.
	DefaultRetryAfterCeiling = time.Hour
	// DefaultInboxWindow is an Inbox's dedup window when its config gives
	// none.
	DefaultInboxWindow = 7 * 24 * time.Hour
)

// The bounds of Config that are not a default's, exported for the same
// reason: the command's config refuses what the library would, with the
// same figures.
const (
	// MinLease is the shortest Config.Lease.
	MinLease = time.Second
	// MaxLease is the longest Config.Lease. A relay that dies holds its
	// claimed messages and its app's election for one lease before another
	// relay takes them over, so a lease of hours is a relay that can stand
	// delivery still for hours: longer than one hour is taken for a
	// mistake (600h meant for 600s), not a setting.
	MaxLease = time.Hour
	// MaxMaxAttempts is the largest Config.MaxAttempts: a row counts its
	// attempts in a 32-bit integer.
	MaxMaxAttempts = math.MaxInt32
)
