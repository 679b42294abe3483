package kafka

import (
	"errors"
	"fmt"

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
