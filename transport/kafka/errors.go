package kafka

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/xadm/mensageria"
)

// ErrFenced is wrapped by every error of a TransactionalSender whose
// transactional id was taken over by another producer (a newer relay of the
// same app). The sender stays fenced: the newer relay owns the id, and a
// fenced sender that re-registered would fence it back in turn.
var ErrFenced = errors.New("mensageria/kafka: transactional id fenced by a newer producer")

// ErrClosed is returned by a Sender, TransactionalSender or Sink used after
// Close.
var ErrClosed = errors.New("mensageria/kafka: closed")

// ErrNoRowID is returned by a TransactionalSender for a batch holding a
// delivery without its outbox row id (Delivery.Seq below 1). The relay
// always sets it; a caller driving the sender directly must too.
var ErrNoRowID = errors.New("mensageria/kafka: the transactional sender needs each delivery's outbox row id in Delivery.Seq")

// FencedError names the transactional id that was fenced.
type FencedError struct {
	TransactionalID string
	Err             error
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("mensageria/kafka: transactional id %q was fenced by a newer producer (%v); this sender waits until its process wins the relay election", e.TransactionalID, e.Err)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// Unwrap returns the broker's error.
func (e *FencedError) Unwrap() error { return e.Err }

// ErrForeignPositions is wrapped by every *ForeignPositionsError.
var ErrForeignPositions = errors.New("mensageria/kafka: the transactional id's position record belongs to another outbox")

// ForeignPositionsError is returned by a TransactionalSender whose
// transactional id holds a position record written for another outbox (an
// app on another database or schema configured with the same id, which
// the ownership catalog of this one cannot see). Row ids of two outboxes
// overlap, so reading this outbox's rows against that record would answer
// rows never produced as already committed, and the relay would settle
// them as delivered. The sender refuses instead: it produces nothing,
// answers every delivery with this error (the relay retries the rows,
// which stay in the outbox), and registers nothing, so the other outbox's
// relay is not fenced.
type ForeignPositionsError struct {
	TransactionalID string
	Topic           string
	// Outbox and App are this relay's; Outbox is uuid.Nil when the sender
	// was never told its outbox (it was not started by a mensageria
	// Client), and then no record naming an outbox can be proven its own.
	Outbox uuid.UUID
	App    string
	// RecordOutbox and RecordApp are what the record names.
	RecordOutbox uuid.UUID
	RecordApp    string
}

func (e *ForeignPositionsError) Error() string {
	ours := "an outbox this sender was never told (it was not started by a mensageria Client)"
	if e.Outbox != uuid.Nil {
		ours = fmt.Sprintf("outbox %s (app %q)", e.Outbox, e.App)
	}
	return fmt.Sprintf("mensageria/kafka: transactional id %q is used by another outbox: its position record in topic %q belongs to outbox %s (app %q), and this relay drains %s; "+
		"reading this outbox's rows against it would settle rows never produced as delivered, so nothing is produced and the rows stay in the outbox. "+
		"Give each outbox its own transactional id (or, once that outbox's relay is gone for good and its rows settled, delete its record with a tombstone under the id)",
		e.TransactionalID, e.Topic, e.RecordOutbox, e.RecordApp, ours)
}

// Is makes errors.Is(err, ErrForeignPositions) true.
func (e *ForeignPositionsError) Is(target error) bool { return target == ErrForeignPositions }

// ConfigError names the config field that is wrong. It wraps
// mensageria.ErrConfig.
type ConfigError = mensageria.ConfigError

// isFenced reports a broker error that means another producer now owns the
// transactional id.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}

// classify marks record errors that no retry can fix as permanent, so the
// relay parks the message instead of retrying it until MaxAttempts.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kerr.MessageTooLarge),
		errors.Is(err, kerr.RecordListTooLarge),
		errors.Is(err, kerr.InvalidRecord),
		errors.Is(err, kerr.CorruptMessage),
		errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.InvalidTopicException):
		return mensageria.Permanent(err)
	}
	return err
}
