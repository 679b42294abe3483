// Package mensageria delivers machine-to-machine messages between services
// with a transactional outbox, a type-scoped relay and idempotent inboxes.
//
// A sender enqueues a message in the same database transaction as its
// business write (EnqueueTx); the relay (Start) delivers it at least once
// through the Sender registered for its type; a receiver applies it through
// an Inbox, which dedupes by natural key in the same transaction as the
// effect, so N deliveries have the effect of one.
//
// See docs/guarantees.md for where each guarantee ends.
package mensageria

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testsignal"
)

// Client enqueues this app's messages and runs its relay.
//
// The Client is the app's one composition root: what its Registry holds
// (the Senders of its types, its Inboxes, what those Senders own) is what
// it records as the app's in the database's ownership catalog, what its
// relay claims and purges, and what receives the relay's settings
// (RelayAware) and its events (the hook interfaces).
type Client struct {
	drv driver.Driver
	cfg Config
	// onEnqueue are Config.Hooks' OnEnqueue hooks, in order.
	onEnqueue []OnEnqueue

	lastNotify atomic.Int64 // unix nanos of the last enqueue that notified

	// registered is 1 + the Registry generation whose ownership is known
	// to be recorded (0: none yet), so enqueues stop checking until the
	// Registry gains a type; regMu keeps concurrent first enqueues from
	// registering all at once.
	registered atomic.Uint64
	regMu      sync.Mutex

	startMu sync.Mutex // serializes Start and Stop
	mu      sync.Mutex // guards relay and stopped
	relay   *relay
	stopped bool // Stop ran since the last Start
	// signals are the test signals of the next relay (testsignal.ForClient);
	// nil, every signal off, outside tests.
	signals *testsignal.Relay
}

// New returns a client over drv. It validates cfg and fills its defaults;
// it does not touch the database (call Migrate, or let the schema owner do
// it).
func New(drv driver.Driver, cfg *Config) (*Client, error) {
	if drv == nil {
		return nil, &ConfigError{Field: "driver", Reason: "nil driver"}
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Client{drv: drv, cfg: c, onEnqueue: splitHooks(c.Hooks).enqueue}, nil
}

// ErrNotReady is wrapped by every error Ready returns.
var ErrNotReady = errors.New("mensageria: relay not ready")

// Ready reports whether the relay is doing its job: nil while it runs and
// its work with the database succeeds (a standby waiting for the election
// another healthy relay holds is ready); an error wrapping ErrNotReady
// saying why not otherwise: not started, stopping or stopped, or a streak
// of failures of a FailureKind, each named with how long it lasts and its
// latest error ("claim failing for 12s (40 attempts): ..."): claims
// failing (nothing is delivered), settles failing (the relay delivers but
// cannot record what it delivered), election rounds failing (the relay
// cannot hold or win its election), or the database unreachable. A
// streak ends at the first success. It is what a readiness probe should
// serve. A route whose
// destination is down does not make it fail: the relay keeps the other
// routes flowing and the route resumes by itself; Routes says which are
// paused, and why.
func (c *Client) Ready() error {
	c.mu.Lock()
	r, stopped := c.relay, c.stopped
	c.mu.Unlock()
	switch {
	case r == nil && stopped:
		return fmt.Errorf("%w: stopped", ErrNotReady)
	case r == nil:
		return fmt.Errorf("%w: not started", ErrNotReady)
	case r.stopped():
		return fmt.Errorf("%w: stopping", ErrNotReady)
	}
	if why := r.failures.reason(); why != "" {
		return fmt.Errorf("%w: %s", ErrNotReady, why)
	}
	return nil
}

// Config returns the effective configuration, defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// Driver returns the driver the client runs on.
func (c *Client) Driver() driver.Driver { return c.drv }

// MigrateMode selects what Migrate does, re-exported from the driver seam.
type MigrateMode = driver.MigrateMode

// The migration modes.
const (
	// MigrateUp applies every missing migration.
	MigrateUp = driver.MigrateUp
	// MigrateCheck verifies the version and changes nothing.
	MigrateCheck = driver.MigrateCheck
)

// Migrate applies the schema migrations (MigrateUp) or verifies them
// (MigrateCheck) on behalf of this client's app. The schema's
// migrations have one owner app, recorded by its first migration: MigrateUp
// from any other app fails with an *OwnerConflictError naming the owner.
func (c *Client) Migrate(ctx context.Context, mode MigrateMode) (driver.MigrateResult, error) {
	return c.drv.Migrate(ctx, driver.MigrateParams{Mode: mode, App: c.cfg.App})
}

// Enqueue stores msgs in one transaction of its own. Either all are stored
// or none: a type without a Sender or an invalid message fails the whole
// call before anything is written. It returns the message ids.
//
// The first enqueue of a Client records the app's ownership first (see
// Register) unless Start did: a type another app owns fails the call with
// an *OwnerConflictError and nothing is written. A type the catalog no
// longer gives any app (an operator released it) fails with an
// *UnownedTypeError, and the next call registers again.
func (c *Client) Enqueue(ctx context.Context, msgs ...Message) ([]uuid.UUID, error) {
	p, ids, err := c.prepare(ctx, msgs)
	if err != nil || len(p.Rows) == 0 {
		return nil, err
	}
	if err := c.ensureRegistered(ctx); err != nil {
		return nil, err
	}
	if err := c.drv.Insert(ctx, p); err != nil {
		return nil, c.insertFailed(err)
	}
	return ids, nil
}

// EnqueueTx stores msgs inside the caller's transaction, so they commit or
// roll back with the business write. tx is the transaction type of the
// driver: pgx.Tx or *sql.Tx for PostgreSQL, *sql.Tx for SQLite. Validation
// is the same as Enqueue's, and a failure in validation or registration
// writes nothing, so the caller's transaction stays usable.
//
// The first enqueue of a Client makes sure the app's ownership is
// recorded, as Enqueue does: on a connection of its own, or, on a backend
// whose open transaction holds the database's one write lock (SQLite,
// driver.TxRegisterer), inside tx, committing or rolling back with it.
func (c *Client) EnqueueTx(ctx context.Context, tx any, msgs ...Message) ([]uuid.UUID, error) {
	p, ids, err := c.prepare(ctx, msgs)
	if err != nil || len(p.Rows) == 0 {
		return nil, err
	}
	if err := c.ensureRegisteredIn(ctx, tx); err != nil {
		return nil, err
	}
	if err := c.drv.InsertTx(ctx, tx, p); err != nil {
		return nil, c.insertFailed(err)
	}
	return ids, nil
}

// insertFailed passes a refused insert's error through unchanged; when the
// database says a type has no owner, the app's ownership was taken back
// since it registered, so the next enqueue registers again.
func (c *Client) insertFailed(err error) error {
	if errors.Is(err, driver.ErrUnownedType) {
		c.registered.Store(0)
	}
	return err
}

// PrepareEnqueue validates msgs exactly as EnqueueTx does (a type without
// a Sender, an invalid message: same typed errors) and returns the rows to
// insert, for a driver that can queue them into a pipeline the caller sends
// itself, such as postgres.Driver.QueueInsert into a pgx.Batch. That saves
// EnqueueTx's own round trip to the database.
//
// It does not touch the database, so it cannot record the app's ownership:
// Register (or Start, or one Enqueue) must have run before the rows are
// sent, or the database refuses them as rows of an unowned type.
func (c *Client) PrepareEnqueue(msgs ...Message) (driver.InsertParams, []uuid.UUID, error) {
	return c.prepare(nil, msgs)
}

const (
	maxKeyLen     = 1000
	maxPayloadLen = 16 << 20
)

// prepare validates msgs and makes their rows; a nil ctx (PrepareEnqueue)
// calls no OnEnqueue hook.
func (c *Client) prepare(ctx context.Context, msgs []Message) (driver.InsertParams, []uuid.UUID, error) {
	rows := make([]driver.InsertRow, len(msgs))
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		if _, ok := c.cfg.Registry.Route(m.Type); !ok {
			return driver.InsertParams{}, nil, &NoSenderError{Type: m.Type, App: c.cfg.App}
		}
		id := m.ID
		if id == uuid.Nil {
			var err error
			if id, err = uuid.NewV7(); err != nil {
				return driver.InsertParams{}, nil, fmt.Errorf("mensageria: message id: %w", err)
			}
		}
		if err := validateMessage(i, &m); err != nil {
			return driver.InsertParams{}, nil, err
		}
		payload := []byte(m.Payload)
		if len(payload) == 0 {
			payload = []byte("{}")
		}
		var headers []byte
		if len(m.Headers) > 0 {
			headers, _ = json.Marshal(m.Headers) // map[string]string always marshals
		}
		rows[i] = driver.InsertRow{MessageID: id, Type: m.Type, Key: m.Key, Payload: payload, Headers: headers, NotBefore: notBefore(m.NotBefore)}
		ids[i] = id
	}
	if ctx != nil && len(c.onEnqueue) > 0 {
		// Only once every message is valid, so no hook sees (and no span
		// records) an enqueue that is refused.
		if err := c.enqueueHooks(ctx, msgs, rows); err != nil {
			return driver.InsertParams{}, nil, err
		}
	}
	return driver.InsertParams{Rows: rows, Notify: c.shouldNotify()}, ids, nil
}

// enqueueHooks calls the OnEnqueue hooks on a copy of each message whose
// headers are the client's own, so the caller's map is never written, and
// stores the headers they leave. The hooks may change only the headers.
func (c *Client) enqueueHooks(ctx context.Context, msgs []Message, rows []driver.InsertRow) error {
	for i := range msgs {
		m := msgs[i]
		m.ID = uuid.UUID(rows[i].MessageID)
		m.Headers = maps.Clone(m.Headers)
		if m.Headers == nil {
			m.Headers = map[string]string{}
		}
		for _, h := range c.onEnqueue {
			h.OnEnqueue(ctx, &m)
		}
		if err := validateHeaders(i, m.Headers); err != nil {
			return err
		}
		rows[i].Headers = nil
		if len(m.Headers) > 0 {
			rows[i].Headers, _ = json.Marshal(m.Headers) // map[string]string always marshals
		}
	}
	return nil
}

func validateMessage(i int, m *Message) error {
	bad := func(field, reason string) error { return &InvalidMessageError{Index: i, Field: field, Reason: reason} }
	switch {
	case m.Key == "":
		return bad("Key", "the natural key is required")
	case len(m.Key) > maxKeyLen:
		return bad("Key", fmt.Sprintf("longer than %d bytes", maxKeyLen))
	case !utf8.ValidString(m.Key) || !utf8.ValidString(m.Type):
		return bad("Key", "type and key must be valid UTF-8")
	case strings.ContainsRune(m.Key, 0):
		return bad("Key", "must not contain NUL, which PostgreSQL text cannot hold")
	case len(m.Payload) > maxPayloadLen:
		return bad("Payload", fmt.Sprintf("larger than %d bytes", maxPayloadLen))
	case len(m.Payload) > 0 && !json.Valid(m.Payload):
		return bad("Payload", "not a valid JSON document")
	case !notBefore(m.NotBefore).Before(notBeforeLimit):
		return bad("NotBefore", fmt.Sprintf("%s is not before year 10000 (UTC), the latest time every backend stores", m.NotBefore.UTC().Format(time.RFC3339Nano)))
	}
	return validateHeaders(i, m.Headers)
}

// notBeforeLimit is the first instant a NotBefore may not be: the outbox
// of every backend refuses an available_at from year 10000 on.
var notBeforeLimit = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)

// notBefore is t as a row stores it: rounded up to the microsecond (the
// backends' resolution), so that rounding never makes a message due
// before its NotBefore; a time before year 1 is zero, due now as any past
// time is.
func notBefore(t time.Time) time.Time {
	if t.IsZero() || t.Year() < 1 {
		return time.Time{}
	}
	r := t.Truncate(time.Microsecond)
	if r.Before(t) {
		r = r.Add(time.Microsecond)
	}
	return r
}

func validateHeaders(i int, headers map[string]string) error {
	for k, v := range headers {
		if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) {
			return &InvalidMessageError{Index: i, Field: "Headers", Reason: "header names must be non-empty and names and values valid UTF-8"}
		}
	}
	return nil
}

// shouldNotify debounces wake-ups: at most one enqueue per NotifyDebounce
// carries a NOTIFY. The relay's poll covers a notification lost with a
// rolled-back transaction.
func (c *Client) shouldNotify() bool {
	if c.cfg.PollOnly {
		return false
	}
	now := time.Now().UnixNano()
	last := c.lastNotify.Load()
	if now-last < int64(c.cfg.NotifyDebounce) {
		return false
	}
	return c.lastNotify.CompareAndSwap(last, now)
}
