package mensageria

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/redact"
)

// Election selects how replicas of one app share the relay.
type Election string

const (
	// ElectionLeader keeps one active relay per app: a lease row that only
	// a role granted it can take elects it (ADR 0025), and an epoch fences
	// a deposed leader out of claiming.
	ElectionLeader Election = "leader"
	// ElectionNone lets every replica relay at once. Claims stay disjoint
	// (row locks and leases) but per-key order is then only as good as the
	// leases: prefer ElectionLeader for ordered routes.
	ElectionNone Election = "none"
)

// Config configures a Client. The zero value of every field but App and
// Registry takes the default named beside it: the exported Default...
// constants (defaults.go), which tools and docs read instead of restating.
type Config struct {
	// App names this application. Replicas of one app share one election;
	// different apps may share one schema. Required.
	App string
	// Registry holds the Senders of the types this app may enqueue and
	// relays, and its Inboxes. What it holds is what the app owns in the
	// database's catalog (see Client.Register). An empty registry is
	// valid: the app enqueues nothing and its relay claims nothing (a pure
	// receiver).
	Registry *Registry

	// BatchSize is how many messages one claim takes. Default
	// DefaultBatchSize (500): a claim
	// and its settle cost about the same whatever their size, so larger
	// batches drain faster (docs/benchmarks.md); under steady load claims
	// are smaller anyway, as they take only what is due.
	BatchSize int
	// Concurrency bounds deliveries in flight. Default DefaultConcurrency
	// (16); at least 1.
	Concurrency int
	// BatchesInFlight is how many claimed batches may be delivering and
	// settling at once, so the next claim overlaps the previous settle.
	// Default DefaultBatchesInFlight (2); batching Senders (one request or
	// transaction per batch) may want more.
	BatchesInFlight int
	// Lease is how long a claimed batch is reserved before another relay
	// may take it again; also the election lease. A batch's deliveries end
	// by the lease less a margin for the settle: a tenth of it, and half a
	// second at least (a quarter of a lease under two seconds): see
	// DeliveryWindow, which a Sender's own timeout must fit in (a Sender
	// that knows its timeout refuses the relay's settings otherwise). It
	// is also how soon a running relay notices that the ownership catalog
	// moved one of its types to another app, or back. Default DefaultLease
	// (30s); MinLease (1s) to MaxLease (1h: a dead relay's messages and
	// election wait one lease for another relay).
	Lease time.Duration
	// MaxAttempts parks a message as dead after this many failed
	// deliveries. Default DefaultMaxAttempts (20); at most MaxMaxAttempts,
	// since a row counts its attempts in a 32-bit integer.
	MaxAttempts int
	// BackoffBase is the delay after the first failure; it doubles per
	// attempt, with jitter, up to BackoffMax. Default DefaultBackoffBase
	// (1s); not negative.
	BackoffBase time.Duration
	// BackoffMax caps one retry delay of the relay's own backoff. Default
	// DefaultBackoffMax (10m); at least BackoffBase. A destination's Retry-After is honoured
	// above it, up to RetryAfterCeiling.
	BackoffMax time.Duration
	// RetryAfterCeiling bounds the delay a destination may ask for
	// (mensageria.RetryAfter, an HTTP Retry-After): the relay waits at
	// least that long, up to this ceiling, for the message and for its
	// route. Default DefaultRetryAfterCeiling (1h).
	RetryAfterCeiling time.Duration
	// RouteFailureThreshold is how many destination-level failures in a
	// row (errors marked Unavailable) pause a route: its types are left
	// out of claims while other routes keep flowing, and after
	// RoutePause one probe message is tried. Such failures never count
	// toward a message's attempts while the route has delivered nothing
	// since they began (docs/adr/0009-route-flow-control.md). Default
	// DefaultRouteFailureThreshold (5).
	RouteFailureThreshold int
	// RoutePause is a paused route's first wait before its probe; each
	// failed probe doubles it, up to RoutePauseMax. A Retry-After longer
	// than the pause wins. Defaults DefaultRoutePause (1s) and
	// DefaultRoutePauseMax (1m).
	RoutePause    time.Duration
	RoutePauseMax time.Duration
	// PollInterval is the longest the relay sleeps with no notification.
	// Default DefaultPollInterval (1s); in poll-only mode it is the latency
	// floor. 1ms to the Lease: the poll is what finds a retry coming due
	// and the batch of a relay that died once its lease ran out.
	PollInterval time.Duration
	// PollOnly disables LISTEN/NOTIFY, for a PgBouncer in transaction mode
	// (which cannot keep a LISTEN session). Default false.
	PollOnly bool
	// NotifyDebounce is the least time between two wake-up notifications
	// sent by this client's enqueues. NOTIFY takes a global lock at commit,
	// so one per enqueue would cap write throughput. Default
	// DefaultNotifyDebounce (10ms); not negative.
	NotifyDebounce time.Duration
	// Election selects the replica policy. Default ElectionLeader.
	Election Election
	// DeliveredRetention keeps delivered rows this long, for inspection,
	// before the purge deletes them. Default 0: a delivered row is deleted
	// when it is settled, which halves the relay's write cost; delivery
	// counts are kept either way.
	DeliveredRetention time.Duration
	// PurgeInterval is how often the active relay purges this app's
	// delivered rows and the records of its Inboxes (each after its own
	// InboxConfig.Window, as registered in the catalog). Default
	// DefaultPurgeInterval (1m).
	PurgeInterval time.Duration
	// ReconcileInterval is how often the active relay runs the reconcile
	// probes of AtMostOnce routes for their messages in doubt (a message
	// left in doubt while the relay runs is probed after one Lease, and
	// after each probe that got no answer, one ReconcileInterval later).
	// Default DefaultReconcileInterval (10s).
	ReconcileInterval time.Duration
	// Logger receives the relay's logs. Default slog.Default(). Its
	// handler is wrapped in redact.Handler: no line shows the user-info,
	// query string or fragment of a URL it quotes.
	Logger *slog.Logger
	// Hooks are optional observers (see Hook); a value that implements
	// none of OnDelivery, OnClaim, OnElection, OnRouteState, OnAttempt and
	// OnEnqueue is refused. Senders in the Registry that implement them are
	// hooked into the relay without being listed here, and a value both here
	// and in the Registry is called once; OnEnqueue is called only for the
	// values listed here. Default none.
	Hooks []Hook
}

// withDefaults returns a copy with every zero field set, or the first
// invalid field.
func (c *Config) withDefaults() (Config, error) {
	if c == nil {
		return Config{}, &ConfigError{Field: "Config", Reason: "nil config"}
	}
	out := *c
	if err := driver.CheckApp(out.App); err != nil {
		return out, &ConfigError{Field: "App", Reason: strings.TrimPrefix(err.Error(), driver.ErrInvalidApp.Error()+": ")}
	}
	if out.Registry == nil {
		out.Registry = NewRegistry()
	}
	out.fillDefaults()
	return out, out.validate()
}

// fillDefaults sets every zero field to its default.
func (c *Config) fillDefaults() {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defd := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.BatchSize, DefaultBatchSize)
	def(&c.Concurrency, DefaultConcurrency)
	def(&c.BatchesInFlight, DefaultBatchesInFlight)
	def(&c.MaxAttempts, DefaultMaxAttempts)
	defd(&c.Lease, DefaultLease)
	defd(&c.BackoffBase, DefaultBackoffBase)
	defd(&c.BackoffMax, DefaultBackoffMax)
	defd(&c.PollInterval, DefaultPollInterval)
	defd(&c.NotifyDebounce, DefaultNotifyDebounce)
	defd(&c.PurgeInterval, DefaultPurgeInterval)
	defd(&c.ReconcileInterval, DefaultReconcileInterval)
	defd(&c.RetryAfterCeiling, DefaultRetryAfterCeiling)
	def(&c.RouteFailureThreshold, DefaultRouteFailureThreshold)
	defd(&c.RoutePause, DefaultRoutePause)
	defd(&c.RoutePauseMax, DefaultRoutePauseMax)
	if c.Election == "" {
		c.Election = ElectionLeader
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	// No relay log line shows a secret of a URL it quotes, whatever
	// Sender's error it carries.
	c.Logger = slog.New(redact.Handler(c.Logger.Handler()))
}

// validate returns the first invalid field. It refuses rather than
// clamps: a value the relay cannot honour as written (a zero where zero
// cannot work is already the default by then, so it is a negative, an
// absurd or a contradictory value) would otherwise be changed silently,
// and the relay would run with figures nobody configured. Each bound is
// documented beside its field and in docs/config.md.
func (c *Config) validate() error {
	switch {
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return &ConfigError{Field: "BatchSize", Reason: fmt.Sprintf("%d must be 1..10000", c.BatchSize)}
	case c.Concurrency < 1:
		return &ConfigError{Field: "Concurrency", Reason: fmt.Sprintf("%d must be at least 1", c.Concurrency)}
	case c.BatchesInFlight < 1 || c.BatchesInFlight > 64:
		return &ConfigError{Field: "BatchesInFlight", Reason: fmt.Sprintf("%d must be 1..64", c.BatchesInFlight)}
	case c.MaxAttempts < 1 || c.MaxAttempts > MaxMaxAttempts:
		return &ConfigError{Field: "MaxAttempts", Reason: fmt.Sprintf("%d must be 1..%d: a row counts its attempts in a 32-bit integer", c.MaxAttempts, MaxMaxAttempts)}
	case c.Lease < MinLease:
		return &ConfigError{Field: "Lease", Reason: fmt.Sprintf("%s must be at least %s", c.Lease, MinLease)}
	case c.Lease > MaxLease:
		return &ConfigError{Field: "Lease", Reason: fmt.Sprintf("%s is longer than %s: a relay that dies holds its claimed messages and its app's election for one lease before another relay takes them over, so delivery could stand still that long", c.Lease, MaxLease)}
	case c.BackoffBase < 0:
		return &ConfigError{Field: "BackoffBase", Reason: fmt.Sprintf("%s must not be negative", c.BackoffBase)}
	case c.BackoffMax < c.BackoffBase:
		return &ConfigError{Field: "BackoffMax", Reason: fmt.Sprintf("%s must be at least BackoffBase (%s), the first delay it caps", c.BackoffMax, c.BackoffBase)}
	case c.PollInterval < time.Millisecond:
		return &ConfigError{Field: "PollInterval", Reason: fmt.Sprintf("%s must be at least 1ms", c.PollInterval)}
	case c.PollInterval > c.Lease:
		return &ConfigError{Field: "PollInterval", Reason: fmt.Sprintf("%s is longer than the Lease (%s): the poll finds what no notification announces (retries coming due, the batch of a relay that died, whose lease ran out), which would then wait longer for it than for the lease", c.PollInterval, c.Lease)}
	case c.NotifyDebounce < 0:
		return &ConfigError{Field: "NotifyDebounce", Reason: fmt.Sprintf("%s must not be negative", c.NotifyDebounce)}
	case c.Election != ElectionLeader && c.Election != ElectionNone:
		return &ConfigError{Field: "Election", Reason: fmt.Sprintf("unknown policy %q (use %q or %q)", c.Election, ElectionLeader, ElectionNone)}
	case c.DeliveredRetention < 0:
		return &ConfigError{Field: "DeliveredRetention", Reason: fmt.Sprintf("%s must not be negative", c.DeliveredRetention)}
	case c.PurgeInterval < 0:
		return &ConfigError{Field: "PurgeInterval", Reason: fmt.Sprintf("%s must not be negative", c.PurgeInterval)}
	case c.ReconcileInterval < time.Millisecond:
		return &ConfigError{Field: "ReconcileInterval", Reason: fmt.Sprintf("%s must be at least 1ms", c.ReconcileInterval)}
	case c.RetryAfterCeiling < time.Second:
		return &ConfigError{Field: "RetryAfterCeiling", Reason: fmt.Sprintf("%s must be at least 1s", c.RetryAfterCeiling)}
	case c.RouteFailureThreshold < 1:
		return &ConfigError{Field: "RouteFailureThreshold", Reason: fmt.Sprintf("%d must be at least 1", c.RouteFailureThreshold)}
	case c.RoutePause < time.Millisecond:
		return &ConfigError{Field: "RoutePause", Reason: fmt.Sprintf("%s must be at least 1ms", c.RoutePause)}
	case c.RoutePauseMax < c.RoutePause:
		return &ConfigError{Field: "RoutePauseMax", Reason: fmt.Sprintf("%s must be at least RoutePause (%s), the first pause it caps", c.RoutePauseMax, c.RoutePause)}
	}
	for i, h := range c.Hooks {
		if !isHook(h) {
			return &ConfigError{Field: fmt.Sprintf("Hooks[%d]", i),
				Reason: fmt.Sprintf("%T implements none of OnDelivery, OnClaim, OnElection, OnRouteState, OnAttempt and OnEnqueue, so it would never be called", h)}
		}
	}
	return nil
}
