package mensageria

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria/driver"
)

// Sentinels to branch on with errors.Is.
var (
	// ErrNoSender: the message type has no Sender registered in this app.
	// Returned (inside *NoSenderError) by Enqueue, which then writes nothing.
	ErrNoSender = errors.New("mensageria: no sender registered for message type")
	// ErrInvalidMessage: a message failed validation before anything was
	// written (missing key, payload that is not JSON, ...).
	ErrInvalidMessage = errors.New("mensageria: invalid message")
	// ErrStale: the message is older than the receiver's dedup window, so
	// the inbox can no longer tell whether it was applied. It is refused,
	// never re-applied blindly.
	ErrStale = errors.New("mensageria: message older than the dedup window")
	// ErrAlreadyStarted: Start was called twice.
	ErrAlreadyStarted = errors.New("mensageria: relay already started")
	// ErrConfig is wrapped by every configuration error: this package's
	// *ConfigError, the drivers' and transports', and the command's.
	ErrConfig = driver.ErrConfig
	// ErrSchemaBehind: the database's schema is older than this build
	// needs. Start refuses to run on it: a relay whose statements name a
	// table a later migration adds would deliver and never settle.
	ErrSchemaBehind = driver.ErrSchemaBehind
	// ErrSchemaAhead: the database was migrated by a newer build than
	// this one; Start refuses it too (run the newer build, or roll the
	// schema back with that build's tools).
	ErrSchemaAhead = driver.ErrSchemaAhead
	// ErrConflict: an inbox already applied a different message under the
	// same dedup key (same key, different payload). Nothing was applied;
	// it is reported, never absorbed as a duplicate.
	ErrConflict = errors.New("mensageria: a different message was already applied under this dedup key")
	// ErrUnownedType is wrapped by every *UnownedTypeError.
	ErrUnownedType = driver.ErrUnownedType
	// ErrOwnerConflict is wrapped by every *OwnerConflictError: a message
	// type, inbox consumer, Kafka transactional id or the schema's
	// migrations belong to another app.
	ErrOwnerConflict = driver.ErrOwnerConflict
	// ErrInvalidApp is wrapped by the refusal of an app name that is not
	// 1-100 letters, digits or ._:- starting with a letter or digit (the
	// Config's App, an ownership transfer's new owner).
	ErrInvalidApp = driver.ErrInvalidApp
)

// ConflictError is returned (wrapping ErrConflict) by an Inbox for a
// delivery whose dedup key was already applied by a message with another
// payload.
type ConflictError struct {
	Consumer string
	Key      string
	ID       uuid.UUID // the refused delivery
	FirstID  uuid.UUID // the message that applied the effect
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("mensageria: inbox %q: key %q was applied by message %s with another payload; message %s is refused as a conflict, not absorbed as a duplicate",
		e.Consumer, e.Key, e.FirstID, e.ID)
}

// Is makes errors.Is(err, ErrConflict) true.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// NoSenderError names the type that has no Sender.
type NoSenderError struct {
	Type string
	App  string
}

func (e *NoSenderError) Error() string {
	return fmt.Sprintf("mensageria: app %q has no sender for message type %q; nothing was enqueued", e.App, e.Type)
}

// Is makes errors.Is(err, ErrNoSender) true.
func (e *NoSenderError) Is(target error) bool { return target == ErrNoSender }

// InvalidMessageError says which message of an Enqueue call (or which
// delivery handed to an Inbox) is wrong. Nothing was written.
type InvalidMessageError struct {
	Index  int
	Field  string
	Reason string
}

func (e *InvalidMessageError) Error() string {
	return fmt.Sprintf("mensageria: message %d: %s: %s; nothing was written", e.Index, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidMessage) true.
func (e *InvalidMessageError) Is(target error) bool { return target == ErrInvalidMessage }

// DecodeError says which part of a received broker message could not be
// read back into a Delivery (the transports' DeliveryOf functions): a
// message not published by a mensageria Sender, or damaged on the way.
// errors.Is(err, ErrInvalidMessage) holds.
type DecodeError struct {
	Transport string // "kafka", "nats"
	Field     string // the header, or "payload"
	Reason    string
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("mensageria/%s: received message: %s: %s", e.Transport, e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidMessage) true.
func (e *DecodeError) Is(target error) bool { return target == ErrInvalidMessage }

// UnreadableRowError is the reason a relay parks an outbox row dead
// without sending it: the row holds what its driver cannot read or no
// transport could carry (written by plain SQL), and Reason names the
// column, as in "created_at is infinity". It is the stored last_error and
// the OnDelivery event's Err; the rest of the row's batch is delivered.
type UnreadableRowError struct {
	ID     int64 // the outbox row
	Reason string
}

func (e *UnreadableRowError) Error() string {
	return "unreadable row: " + e.Reason + "; parked without sending (fix the row and run 'mensageria dead retry', or discard it)"
}

// ConfigError names the Config field that is wrong.
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("mensageria: config %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// TxTypeError is returned by EnqueueTx for a transaction the driver cannot
// use; nothing is written.
type TxTypeError = driver.TxTypeError

// UnownedTypeError is returned by Enqueue and EnqueueTx when the database
// refuses a row because no app owns its type in the catalog (an operator
// released it since this app registered); nothing is written, and the next
// enqueue records the app's ownership again first.
type UnownedTypeError = driver.UnownedTypeError

// permanentError marks a delivery failure that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps a Sender error so the relay parks the message as dead at
// once, with err as its reason, instead of retrying it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// unavailableError marks a failure of the destination, not of the message.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// Unavailable wraps a Sender error that is about the destination rather
// than the message: a refused or reset connection, a timeout, a 5xx, a
// 429, a 401 or 407, a broker that is down, a topic or stream that is
// missing. The relay counts such failures toward the route's health, not
// toward the message's attempts, so an outage never turns a backlog into
// dead letters: after Config.RouteFailureThreshold of them in a row the
// route pauses and probes (docs/adr/0009-route-flow-control.md). Only a
// failure while the route delivers other messages counts as the message's
// attempt, since the destination is evidently up: a message that gets a
// 500 every time still reaches MaxAttempts. Combine with RetryAfter when
// the destination said when to come back; Permanent wins over Unavailable.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

// IsUnavailable reports whether err was marked with Unavailable.
func IsUnavailable(err error) bool {
	var u *unavailableError
	return errors.As(err, &u)
}

// retryAfterError carries a destination's requested delay.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter wraps a Sender error with the delay the destination asked for
// (an HTTP Retry-After, say). The relay waits at least that long before
// the message's next attempt, above BackoffMax too, bounded only by
// Config.RetryAfterCeiling; wrapped in Unavailable, it also pauses the
// whole route until then.
func RetryAfter(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, after: after}
}

// RetryAfterOf returns the delay requested through RetryAfter, if any.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}
