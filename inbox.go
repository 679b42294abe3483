package mensageria

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
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
	// exceed the sender's retry horizon. Default 7 days; negative disables
	// the staleness check.
	Window time.Duration
	// DedupKey derives the dedup key of a delivery. Default: its natural
	// key. Ordered streams that carry many messages per key should include
	// a version, or use the message id.
	DedupKey func(*Delivery) string
}

// Inbox makes a receiver idempotent: each (consumer, dedup key) is applied
// once, in the same transaction as its effect.
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
		cfg.Window = 7 * 24 * time.Hour
	}
	if cfg.DedupKey == nil {
		cfg.DedupKey = func(d *Delivery) string { return d.Key }
	}
	return &Inbox{drv: drv, cfg: cfg}, nil
}

// Consumer returns the inbox's consumer name.
func (in *Inbox) Consumer() string { return in.cfg.Consumer }

// Apply runs effect once per dedup key. A repeat returns Duplicate without
// running it; a concurrent repeat waits for the first and then reports
// Duplicate; a message older than the window returns a *StaleError.
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
// what bounds a receiver's throughput. If any effect fails, that
// transaction is rolled back as a whole and every delivery is applied again
// in a transaction of its own, so one bad message costs its neighbours a
// retry of their effect, never a lost or doubled one. The results and
// errors are index-aligned with ds; a nil error with Duplicate false means
// the effect ran and committed.
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
	errBatchFailed := errors.New("batch failed")
	err := in.drv.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		for i, d := range ds {
			r, err := in.applyIn(ctx, tx, d, effect)
			if err != nil {
				return errBatchFailed
			}
			results[i] = r
		}
		return nil
	})
	if err == nil {
		return results, errs
	}
	// Fall back to one transaction per delivery, so each gets its own
	// outcome.
	for i, d := range ds {
		results[i], errs[i] = in.Apply(ctx, d, effect)
	}
	return results, errs
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
	rec := driver.InboxRecord{Consumer: in.cfg.Consumer, Key: key, MessageID: d.ID}
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
		return ApplyResult{Duplicate: true, FirstID: r.FirstMessageID}, nil
	}
	return ApplyResult{}, effect(ctx, tx, d)
}
