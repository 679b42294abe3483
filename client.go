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
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

// Client enqueues this app's messages and runs its relay.
type Client struct {
	drv   driver.Driver
	cfg   Config
	hooks hooks

	lastNotify atomic.Int64 // unix nanos of the last enqueue that notified

	mu    sync.Mutex
	relay *relay
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
	return &Client{drv: drv, cfg: c, hooks: splitHooks(c.Hooks)}, nil
}

// Register records in the ownership catalog what this app owns: its
// registered types, its Inboxes' consumers (with their windows) and the
// resources its Senders hold (ResourceOwner). Start and the first Enqueue
// call it; a conflict with another app is an *OwnerConflictError naming
// both, and nothing is recorded.
func (c *Client) Register(ctx context.Context) (driver.RegisterResult, error) {
	return driver.RegisterResult{}, errors.New("FOUNDATION STUB: Register comes with the client work")
}

// Ready reports whether the relay is doing its job: nil while it runs and
// its settles succeed; an error saying why not (not started, stopped,
// settles failing on a database error).
func (c *Client) Ready() error {
	return errors.New("FOUNDATION STUB: Ready comes with the client work")
}

// Config returns the effective configuration, defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// Driver returns the driver the client runs on.
func (c *Client) Driver() driver.Driver { return c.drv }

// Migrate applies the schema migrations (driver.MigrateUp) or verifies them
// (driver.MigrateCheck) on behalf of this client's app. The schema's
// migrations have one owner app, recorded by its first migration: MigrateUp
// from any other app fails with an *OwnerConflictError naming the owner.
func (c *Client) Migrate(ctx context.Context, mode driver.MigrateMode) (driver.MigrateResult, error) {
	return c.drv.Migrate(ctx, driver.MigrateParams{Mode: mode, App: c.cfg.App})
}

// Enqueue stores msgs in one transaction of its own. Either all are stored
// or none: a type without a Sender or an invalid message fails the whole
// call before anything is written. It returns the message ids.
func (c *Client) Enqueue(ctx context.Context, msgs ...Message) ([]uuid.UUID, error) {
	p, ids, err := c.prepare(msgs)
	if err != nil || len(p.Rows) == 0 {
		return nil, err
	}
	if err := c.drv.Insert(ctx, p); err != nil {
		return nil, err
	}
	return ids, nil
}

// EnqueueTx stores msgs inside the caller's transaction, so they commit or
// roll back with the business write. tx is the transaction type of the
// driver: pgx.Tx or *sql.Tx for PostgreSQL, *sql.Tx for SQLite. Validation
// is the same as Enqueue's, and a failure writes nothing, so the caller's
// transaction stays usable.
func (c *Client) EnqueueTx(ctx context.Context, tx any, msgs ...Message) ([]uuid.UUID, error) {
	p, ids, err := c.prepare(msgs)
	if err != nil || len(p.Rows) == 0 {
		return nil, err
	}
	if err := c.drv.InsertTx(ctx, tx, p); err != nil {
		return nil, err
	}
	return ids, nil
}

// PrepareEnqueue validates msgs exactly as EnqueueTx does (a type without
// a Sender, an invalid message: same typed errors) and returns the rows to
// insert, for a driver that can queue them into a pipeline the caller sends
// itself, such as postgres.Driver.QueueInsert into a pgx.Batch. That saves
// EnqueueTx's own round trip to the database.
func (c *Client) PrepareEnqueue(msgs ...Message) (driver.InsertParams, []uuid.UUID, error) {
	return c.prepare(msgs)
}

const (
	maxKeyLen     = 1000
	maxPayloadLen = 16 << 20
)

func (c *Client) prepare(msgs []Message) (driver.InsertParams, []uuid.UUID, error) {
	rows := make([]driver.InsertRow, len(msgs))
	ids := make([]uuid.UUID, len(msgs))
	for i, m := range msgs {
		if _, ok := c.cfg.Registry.Route(m.Type); !ok {
			return driver.InsertParams{}, nil, &NoSenderError{Type: m.Type, App: c.cfg.App}
		}
		if err := validateMessage(i, &m); err != nil {
			return driver.InsertParams{}, nil, err
		}
		id := m.ID
		if id == uuid.Nil {
			var err error
			if id, err = uuid.NewV7(); err != nil {
				return driver.InsertParams{}, nil, fmt.Errorf("mensageria: message id: %w", err)
			}
		}
		payload := []byte(m.Payload)
		if len(payload) == 0 {
			payload = []byte("{}")
		}
		var headers []byte
		if len(m.Headers) > 0 {
			headers, _ = json.Marshal(m.Headers) // map[string]string always marshals
		}
		rows[i] = driver.InsertRow{MessageID: id, Type: m.Type, Key: m.Key, Payload: payload, Headers: headers}
		ids[i] = id
	}
	return driver.InsertParams{Rows: rows, Notify: c.shouldNotify()}, ids, nil
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
	}
	for k, v := range m.Headers {
		if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) {
			return bad("Headers", "header names must be non-empty and names and values valid UTF-8")
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
