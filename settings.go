package mensageria

import (
	"math"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
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

// SettleMargin is the end of a lease the relay keeps for recording what a
// batch's deliveries did: a tenth of the lease, and at least half a second
// (a quarter of a lease under two seconds).
func SettleMargin(lease time.Duration) time.Duration { return settleMargin(lease) }

// DeliveryWindow is how long the deliveries of one claimed batch may take:
// the lease less its SettleMargin. The relay cancels a delivery still
// running then (and retries it), so a Sender's own timeout must not be
// longer: RelaySettings.DeliveryWindow hands it to the Senders, and the
// command's config refuses an http timeout beyond it.
func DeliveryWindow(lease time.Duration) time.Duration { return lease - settleMargin(lease) }

// RelaySettings is what the Client resolved for its relay: the app, the
// outbox it drains and the effective timing. The parts that depend on it
// (a Kafka transactional sender's retention, a NATS sender's duplicate
// window) receive it through RelayAware instead of restating it.
type RelaySettings struct {
	App string
	// OutboxID identifies the outbox (schema and database) for good; a
	// record kept outside the database (a Kafka transactional position)
	// names it so that it is never read against another outbox's rows.
	OutboxID    uuid.UUID
	Lease       time.Duration
	BackoffBase time.Duration
	BackoffMax  time.Duration
	MaxAttempts int
	// RetryHorizon is the longest the relay's own backoff keeps a message
	// retried: every backoff delay up to MaxAttempts plus a lease per
	// attempt. A dedup window (an inbox's, a broker's) shorter than this
	// lets a late retry through as new. A destination stretches it on
	// top: its Retry-After (up to RetryAfterCeiling per attempt), and an
	// outage, during which a route waits without counting attempts.
	RetryHorizon       time.Duration
	DeliveredRetention time.Duration
	// DeliveryWindow is how long one claimed batch's deliveries may take
	// (DeliveryWindow of the Lease): a Sender whose own timeout is longer
	// should refuse the settings, since the relay cuts every delivery at
	// this point whatever that timeout says.
	DeliveryWindow time.Duration
}

// RelayAware is implemented by Senders (and anything else in a Registry)
// that adapt to the relay's settings. Client.Start calls UseRelaySettings
// once, after recording the app's ownership and before the first claim;
// an error fails Start.
type RelayAware interface {
	UseRelaySettings(RelaySettings) error
}

// ResourceOwner is implemented by Senders that hold something two apps
// must never share, such as a Kafka transactional id. Client.Start records
// those resources in the ownership catalog together with the app's types,
// so a second app configured with the same one fails at start.
type ResourceOwner interface {
	OwnedResources() []driver.Resource
}

// Ownership catalog vocabulary, re-exported from the driver seam.
type (
	// Resource is one entry of the ownership catalog.
	Resource = driver.Resource
	// ResourceKind is a kind of catalog entry.
	ResourceKind = driver.ResourceKind
	// Ownership is a catalog entry and its owning app.
	Ownership = driver.Ownership
	// OwnerConflictError says that an app claimed what another app owns;
	// errors.Is(err, ErrOwnerConflict) holds.
	OwnerConflictError = driver.OwnerConflictError
)

// UnownedTypeError is returned by Enqueue and EnqueueTx when the database
// refuses a row because no app owns its type in the catalog (an operator
// released it since this app registered); nothing is written, and the next
// enqueue records the app's ownership again first.
type UnownedTypeError = driver.UnownedTypeError

// ErrUnownedType is wrapped by every *UnownedTypeError.
var ErrUnownedType = driver.ErrUnownedType

// ErrOwnerConflict is wrapped by every *OwnerConflictError: a message type,
// inbox consumer, Kafka transactional id or the schema's migrations belong
// to another app.
var ErrOwnerConflict = driver.ErrOwnerConflict

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

// DestinationNamer is implemented by Senders that can say where they
// deliver ("http https://billing/m2m", "kafka topic pedidos"). The relay
// stores it, with the app, beside a retried or dead message's error, so a
// dead letter says which route answered.
type DestinationNamer interface {
	Destination() string
}
