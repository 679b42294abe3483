package mensageria

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/m2mbatch"
)

// Tx is the transaction an inbox effect runs in. Raw returns the backend's
// own transaction (pgx.Tx for PostgreSQL, *sql.Tx for SQLite) for the
// effect's statements.
type Tx = driver.Tx

// Effect applies one message inside the inbox transaction. Returning an
// error rolls back the effect and the dedup record together, so a
// redelivery applies it again.
type Effect func(ctx context.Context, tx Tx, d *Delivery) error

// InboxConfig configures an Inbox.
type InboxConfig struct {
	// Consumer names the effect being deduplicated (usually one per
	// receiving handler). Required.
	Consumer string
	// Window is the dedup window: records are kept this long and a message
	// created earlier than now-Window is refused with ErrStale. It must
	// exceed the sender's retry horizon. Default DefaultInboxWindow (7
	// days); negative disables the staleness check, and then no record is
	// ever purged. The window is recorded in the ownership catalog when
	// the Inbox is in a Client's Registry (Registry.RegisterInbox), and
	// that app's relay purges the records after it; no other app's purge
	// touches them.
	Window time.Duration
	// DedupKey derives the dedup key of a delivery. Default: its natural
	// key. Ordered streams that carry many messages per key should include
	// a version, or use the message id.
	DedupKey func(*Delivery) string
}

// Inbox makes a receiver idempotent: each (consumer, dedup key) is applied
// once, in the same transaction as its effect. The record keeps a digest of
// the payload, so the same key arriving with a different payload, under
// another message id or its own, is told apart from a redelivery: a
// *ConflictError, and nothing is applied.
type Inbox struct {
	drv driver.Driver
	cfg InboxConfig
}

// ApplyResult tells what Apply did.
type ApplyResult struct {
	// Duplicate is true when the effect had been applied already; nothing
	// ran this time.
	Duplicate bool
	// FirstID is the message that applied the effect, when Duplicate.
	FirstID uuid.UUID
}

// StaleError is returned (wrapping ErrStale) for a message older than the
// dedup window.
type StaleError struct {
	Consumer  string
	Key       string
	CreatedAt time.Time
	Window    time.Duration
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("mensageria: inbox %q: message for key %q created %s is older than the %s dedup window; refusing to apply it blindly",
		e.Consumer, e.Key, e.CreatedAt.UTC().Format(time.RFC3339), e.Window)
}

// Is makes errors.Is(err, ErrStale) true.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// NewInbox returns an inbox on drv.
func NewInbox(drv driver.Driver, cfg InboxConfig) (*Inbox, error) {
	if drv == nil {
		return nil, &ConfigError{Field: "driver", Reason: "nil driver"}
	}
	if cfg.Consumer == "" || len(cfg.Consumer) > 200 {
		return nil, &ConfigError{Field: "Consumer", Reason: "must be 1-200 bytes"}
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultInboxWindow
	}
	if cfg.DedupKey == nil {
		cfg.DedupKey = func(d *Delivery) string { return d.Key }
	}
	return &Inbox{drv: drv, cfg: cfg}, nil
}

// Consumer returns the inbox's consumer name.
func (in *Inbox) Consumer() string { return in.cfg.Consumer }

// Window returns the inbox's dedup window, the default filled in; negative
// when the staleness check is disabled.
func (in *Inbox) Window() time.Duration { return in.cfg.Window }

// Apply runs effect once per dedup key. A repeat returns Duplicate without
// running it; a concurrent repeat waits for the first and then reports
// Duplicate; a message older than the window returns a *StaleError; a
// different payload under a key another message applied returns a
// *ConflictError (errors.Is(err, ErrConflict)) and runs nothing.
func (in *Inbox) Apply(ctx context.Context, d *Delivery, effect Effect) (ApplyResult, error) {
	if d == nil || effect == nil {
		return ApplyResult{}, errors.New("mensageria: Inbox.Apply needs a delivery and an effect")
	}
	var res ApplyResult
	err := in.drv.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		var err error
		res, err = in.applyIn(ctx, tx, d, effect)
		return err
	})
	if err != nil {
		return ApplyResult{}, err
	}
	return res, nil
}

// ApplyBatch applies many deliveries, each once per dedup key, in one
// database transaction: one commit instead of one per message, which is
// what bounds a receiver's throughput. A failing effect rolls that
// transaction back; the deliveries before it are applied again in one of
// their own, the failing one alone (failing again, it keeps its error),
// and the rest go on the same way: the rule of m2mbatch, in
// docs/guarantees.md "Poison messages in a batch". So one bad message
// costs its neighbours a retry of their effect, never a lost or doubled
// one. A conflict (see Apply) writes nothing, so it is that
// delivery's error alone and the batch goes on. The results and errors are
// index-aligned with ds; a nil error with Duplicate false means the effect
// ran and committed.
func (in *Inbox) ApplyBatch(ctx context.Context, ds []*Delivery, effect Effect) ([]ApplyResult, []error) {
	results := make([]ApplyResult, len(ds))
	errs := make([]error, len(ds))
	if len(ds) == 0 {
		return results, errs
	}
	if effect == nil {
		for i := range errs {
			errs[i] = errors.New("mensageria: Inbox.ApplyBatch needs an effect")
		}
		return results, errs
	}
	// The items are indexes into ds, so each outcome lands in its place.
	indexes := make([]int, len(ds))
	for i := range indexes {
		indexes[i] = i
	}
	settled := make([]bool, len(ds))
	err := m2mbatch.Apply(ctx, indexes, m2mbatch.Policy[int]{
		Commit: func(ctx context.Context, idx []int) error {
			return in.applyAll(ctx, ds, idx, effect, results, errs)
		},
		Committed: func(idx []int) {
			for _, i := range idx {
				settled[i] = true
			}
		},
		// The inbox retries nothing: its caller answers the sender, whose
		// retry it is. A failure is the delivery's outcome.
		Poison: func(_ context.Context, i int, err error) error {
			results[i], errs[i], settled[i] = ApplyResult{}, err, true
			return nil
		},
	})
	if err != nil {
		for i, done := range settled {
			if !done {
				results[i], errs[i] = ApplyResult{}, err
			}
		}
	}
	return results, errs
}

// applyAll applies ds[i] for each i of idx in one transaction, writing each
// one's outcome; an outcome is final only once the transaction commits.
func (in *Inbox) applyAll(ctx context.Context, ds []*Delivery, idx []int, effect Effect, results []ApplyResult, errs []error) error {
	return in.drv.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		for k, i := range idx {
			r, err := in.applyIn(ctx, tx, ds[i], effect)
			var conflict *ConflictError
			switch {
			case errors.As(err, &conflict):
				results[i], errs[i] = ApplyResult{}, err
			case err != nil:
				return &m2mbatch.ItemError{Index: k, Err: err}
			default:
				results[i], errs[i] = r, nil
			}
		}
		return nil
	})
}

// applyIn records and applies one delivery inside tx.
func (in *Inbox) applyIn(ctx context.Context, tx driver.Tx, d *Delivery, effect Effect) (ApplyResult, error) {
	if d == nil {
		return ApplyResult{}, errors.New("mensageria: nil delivery")
	}
	key := in.cfg.DedupKey(d)
	switch {
	case key == "":
		return ApplyResult{}, &InvalidMessageError{Field: "Key", Reason: "empty dedup key"}
	case !utf8.ValidString(key) || strings.ContainsRune(key, 0):
		return ApplyResult{}, &InvalidMessageError{Field: "Key", Reason: "the dedup key must be valid UTF-8 without NUL"}
	}
	hash := payloadHash(d.Payload)
	rec := driver.InboxRecord{Consumer: in.cfg.Consumer, Key: key, MessageID: d.ID, PayloadHash: hash}
	if in.cfg.Window > 0 {
		rec.CreatedAt, rec.Window = d.CreatedAt, in.cfg.Window
	}
	r, err := tx.InboxRecord(ctx, rec)
	if err != nil {
		return ApplyResult{}, err
	}
	if r.Stale {
		return ApplyResult{}, &StaleError{Consumer: in.cfg.Consumer, Key: key, CreatedAt: d.CreatedAt, Window: in.cfg.Window}
	}
	if r.Duplicate {
		// A record without a digest predates them: it can only be taken
		// for a duplicate, as before. The same message id with another
		// payload is a conflict too (ADR 0026): its row was changed
		// after the first delivery applied it, and answering duplicate
		// would tell its sender that a payload was applied that never was.
		if r.FirstPayloadHash != nil && !bytes.Equal(r.FirstPayloadHash, hash) {
			return ApplyResult{}, &ConflictError{Consumer: in.cfg.Consumer, Key: key, ID: d.ID, FirstID: r.FirstMessageID}
		}
		return ApplyResult{Duplicate: true, FirstID: r.FirstMessageID}, nil
	}
	return ApplyResult{}, effect(ctx, tx, d)
}

// payloadHash is the digest an inbox record keeps of a payload: SHA-256 of
// its compact form when it is a JSON document, so a sender that re-encodes
// the same document with other whitespace is not taken for a different
// message; of its bytes otherwise.
func payloadHash(p []byte) []byte {
	var buf bytes.Buffer
	if json.Compact(&buf, p) == nil {
		p = buf.Bytes()
	}
	sum := sha256.Sum256(p)
	return sum[:]
}
