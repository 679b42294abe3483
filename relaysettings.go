package mensageria

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

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

// settings is what the relay resolved, as RelayAware parts receive it.
func (c *Client) settings(outbox [16]byte) RelaySettings {
	return RelaySettings{
		App:                c.cfg.App,
		OutboxID:           uuid.UUID(outbox),
		Lease:              c.cfg.Lease,
		BackoffBase:        c.cfg.BackoffBase,
		BackoffMax:         c.cfg.BackoffMax,
		MaxAttempts:        c.cfg.MaxAttempts,
		RetryHorizon:       retryHorizon(&c.cfg),
		DeliveredRetention: c.cfg.DeliveredRetention,
		DeliveryWindow:     DeliveryWindow(c.cfg.Lease),
	}
}

// useRelaySettings calls UseRelaySettings once on each distinct Sender,
// its route's reconcile probe and each Inbox of the Registry that
// implements RelayAware.
func (c *Client) useRelaySettings(reg driver.RegisterResult) error {
	set := c.settings(reg.OutboxID)
	for _, s := range c.cfg.Registry.senders() {
		if ra, ok := s.sender.(RelayAware); ok {
			if err := ra.UseRelaySettings(set); err != nil {
				return fmt.Errorf("mensageria: app %q: the Sender of type %q (%T) refused the relay's settings: %w", c.cfg.App, s.types[0], s.sender, err)
			}
		}
	}
	// A route's reconcile probe runs inside a lease as its Sender does
	// (maintenance's probe batches), so it is told the same settings.
	for _, s := range c.cfg.Registry.senders() {
		rt, _ := c.cfg.Registry.Route(s.types[0])
		if ra, ok := rt.Reconciler.(RelayAware); ok {
			if err := ra.UseRelaySettings(set); err != nil {
				return fmt.Errorf("mensageria: app %q: the reconcile probe of type %q (%T) refused the relay's settings: %w", c.cfg.App, s.types[0], rt.Reconciler, err)
			}
		}
	}
	for _, in := range c.cfg.Registry.Inboxes() {
		if ra, ok := any(in).(RelayAware); ok {
			if err := ra.UseRelaySettings(set); err != nil {
				return fmt.Errorf("mensageria: app %q: inbox %q refused the relay's settings: %w", c.cfg.App, in.Consumer(), err)
			}
		}
	}
	return nil
}
