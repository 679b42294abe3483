package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

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

// isFenced reports a broker error that means the transactional id's
// producer epoch is no longer this producer's: another producer with the
// id registered (a newer relay of the app), or the coordinator aborted a
// transaction left open past its timeout and bumped the epoch. An
// authorization failure on the id is not a fence: nothing else holds it,
// and it is answered as the destination being unavailable.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch)
}

// TopicError is what the cluster answered about a topic: it does not exist
// (UNKNOWN_TOPIC_OR_PARTITION), this client may not use it
// (TOPIC_AUTHORIZATION_FAILED), its name is not valid, or it refused a
// record. Err is the Kafka error, so errors.Is(err,
// kerr.UnknownTopicOrPartition) and the like hold.
type TopicError struct {
	Topic string
	// Partition is the partition the answer was about, -1 when it was
	// about the whole topic.
	Partition int32
	Err       error
}

func (e *TopicError) Error() string {
	where := fmt.Sprintf("topic %q", e.Topic)
	if e.Partition >= 0 {
		where += fmt.Sprintf(" partition %d", e.Partition)
	}
	msg := fmt.Sprintf("mensageria/kafka: %s: %v", where, e.Err)
	switch {
	case errors.Is(e.Err, kerr.UnknownTopicOrPartition), errors.Is(e.Err, kerr.UnknownTopicID):
		msg += "; the topic does not exist and this client does not create topics: create it (or let the client create it with kgo.AllowAutoTopicCreation, where the brokers allow it)"
	case errors.Is(e.Err, kerr.TopicAuthorizationFailed):
		msg += "; the client's principal may not write to it: grant it WRITE on the topic"
	case errors.Is(e.Err, kerr.InvalidTopicException):
		msg += "; Kafka refuses the name"
	}
	return msg
}

// Unwrap returns the Kafka error.
func (e *TopicError) Unwrap() error { return e.Err }

// UnreachableError says that the cluster could not be reached: the last
// attempt to connect to, or to read from, one of its brokers failed.
type UnreachableError struct {
	// Broker is the broker of that attempt ("host:port").
	Broker string
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("mensageria/kafka: broker %s unreachable: %v", e.Broker, e.Err)
}

// Unwrap returns the network error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// NoAckError is the answer for a record the cluster did not acknowledge
// before the delivery's deadline (the relay gives each batch its lease,
// less a margin for the settle, see mensageria.Config.Lease). Cause is
// what the sender found out about the destination meanwhile (an
// *UnreachableError, a *TopicError about a partition without a leader);
// nil when it found nothing, and then Checked
// says whether the cluster was asked about the topic and showed nothing
// wrong. errors.Is(err, context.DeadlineExceeded) holds when the deadline
// was the context's.
type NoAckError struct {
	Topic   string
	Waited  time.Duration
	Cause   error
	Checked bool
	ctxErr  error
}

func (e *NoAckError) Error() string {
	msg := fmt.Sprintf("mensageria/kafka: topic %q: no acknowledgement within %s", e.Topic, e.Waited.Round(time.Millisecond))
	switch {
	case e.Cause != nil:
		return msg + ": " + e.Cause.Error()
	case e.Checked:
		return msg + " (the cluster answers and shows the topic with a leader for every partition: the brokers are slow, overloaded or reconnecting)"
	}
	return msg
}

// Unwrap returns the cause found and the context's error.
func (e *NoAckError) Unwrap() []error {
	var out []error
	for _, err := range []error{e.Cause, e.ctxErr} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// classify sorts the answer for one record of topic (the table in
// docs/config.md, "Broker errors", which transporttest.Run (TestConformance)
// checks row by row). A record no retry can fix is Permanent: the
// relay parks it. A failure of the destination (the topic missing, no
// authorization, no leader, the brokers unreachable or too slow) is
// mensageria.Unavailable: about the route, never the message's fault.
// Anything else is returned as it is, a retry counted against the
// message's attempts.
func classify(topic string, partition int32, err error) error {
	switch {
	case err == nil:
		return nil
	case mensageria.IsPermanent(err), mensageria.IsUnavailable(err):
		return err
	}
	var (
		te *TopicError
		ue *UnreachableError
		ne *NoAckError
	)
	if !errors.As(err, &te) && !errors.As(err, &ue) && !errors.As(err, &ne) {
		if _, ok := errors.AsType[*kerr.Error](err); ok {
			err = &TopicError{Topic: topic, Partition: partition, Err: err}
		}
	}
	switch {
	case messageLevel(err):
		return mensageria.Permanent(err)
	case routeLevel(err):
		return mensageria.Unavailable(err)
	}
	return err
}

// messageLevel reports the refusals of one record: retrying it can never
// succeed, and other records are not affected.
func messageLevel(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) ||
		errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) ||
		errors.Is(err, kerr.CorruptMessage) ||
		errors.Is(err, kerr.InvalidTimestamp) ||
		errors.Is(err, kerr.UnsupportedForMessageFormat) ||
		errors.Is(err, kerr.InvalidTopicException)
}

// routeLevel reports failures of the destination rather than of a
// message.
func routeLevel(err error) bool {
	var (
		ue *UnreachableError
		ne *NoAckError
		oe *net.OpError
	)
	switch {
	case errors.As(err, &ue), errors.As(err, &ne), errors.As(err, &oe):
		return true
	case errors.Is(err, kerr.UnknownTopicOrPartition),
		errors.Is(err, kerr.UnknownTopicID),
		errors.Is(err, kerr.TopicAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed),
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed),
		errors.Is(err, kerr.SaslAuthenticationFailed),
		errors.Is(err, kerr.UnsupportedSaslMechanism),
		errors.Is(err, kerr.IllegalSaslState),
		errors.Is(err, kerr.ConcurrentTransactions),
		errors.Is(err, kerr.ThrottlingQuotaExceeded),
		kerr.IsRetriable(err):
		return true
	case errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, kgo.ErrRecordTimeout),
		errors.Is(err, kgo.ErrRecordRetries),
		errors.Is(err, kgo.ErrMaxBuffered),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE):
		return true
	}
	return false
}
