package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xadm/mensageria"
)

// StreamError says that the stream a Sender publishes to does not exist,
// that no stream holds its subject, or that JetStream is not enabled. Err
// is the server's answer (jetstream.ErrStreamNotFound,
// jetstream.ErrNoStreamResponse, jetstream.ErrJetStreamNotEnabled...), so
// errors.Is holds for those.
type StreamError struct {
	// Stream is the configured stream, "" when it was looked up by the
	// subject.
	Stream  string
	Subject string
	Err     error
}

func (e *StreamError) Error() string {
	switch {
	case errors.Is(e.Err, jetstream.ErrJetStreamNotEnabled), errors.Is(e.Err, jetstream.ErrJetStreamNotEnabledForAccount):
		return fmt.Sprintf("mensageria/nats: %v: the server (or this connection's account) has no JetStream; enable it where the relay publishes", e.Err)
	case e.Stream != "":
		return fmt.Sprintf("mensageria/nats: stream %q: %v; create it, or name the stream that holds subject %q", e.Stream, e.Err, e.Subject)
	}
	return fmt.Sprintf("mensageria/nats: no stream holds subject %q (%v); create a stream for it, or correct the subject", e.Subject, e.Err)
}

// Unwrap returns the server's answer.
func (e *StreamError) Unwrap() error { return e.Err }

// NoAckError is the answer for a message JetStream did not acknowledge
// before the delivery's deadline (the relay gives each batch its lease,
// less a margin for the settle, see mensageria.Config.Lease). Cause is
// the connection's state when it was not connected then, nil otherwise.
// errors.Is(err, context.DeadlineExceeded) holds when the deadline was the
// context's.
type NoAckError struct {
	Subject string
	Waited  time.Duration
	Cause   error
	ctxErr  error
}

func (e *NoAckError) Error() string {
	msg := fmt.Sprintf("mensageria/nats: subject %q: no acknowledgement from JetStream within %s", e.Subject, e.Waited.Round(time.Millisecond))
	if e.Cause != nil {
		return msg + ": " + e.Cause.Error()
	}
	return msg
}

// Unwrap returns the cause and the context's error.
func (e *NoAckError) Unwrap() []error {
	var out []error
	for _, err := range []error{e.Cause, e.ctxErr} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// JetStream API error codes the Sender tells apart that the jetstream
// package does not name (nats-server's errors.json).
const (
	codeStreamNotMatch    jetstream.ErrorCode = 10060 // the subject is in another stream than the expected one
	codeStreamStoreFailed jetstream.ErrorCode = 10077 // the stream is full (discard new), or its store failed
)

// classify sorts JetStream's answer for one message published to subject
// (the table in docs/config.md, "Broker errors"). A message no retry can fix is
// Permanent; a failure of the destination (no stream for the subject, the
// stream missing, full or unavailable, the server unreachable, no
// acknowledgement before the deadline) is mensageria.Unavailable; anything
// else is returned as it is, a retry counted against the message.
func classify(stream, subject string, err error) error {
	switch {
	case err == nil:
		return nil
	case mensageria.IsPermanent(err), mensageria.IsUnavailable(err):
		return err
	}
	var ae *jetstream.APIError
	hasAPI := errors.As(err, &ae) && ae != nil
	switch {
	case errors.Is(err, natsgo.ErrMaxPayload),
		hasAPI && ae.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
		return mensageria.Permanent(err)
	case errors.Is(err, jetstream.ErrNoStreamResponse),
		hasAPI && (ae.ErrorCode == jetstream.JSErrCodeStreamNotFound || ae.ErrorCode == codeStreamNotMatch ||
			ae.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabled || ae.ErrorCode == jetstream.JSErrCodeJetStreamNotEnabledForAccount):
		var se *StreamError
		if !errors.As(err, &se) {
			err = &StreamError{Stream: stream, Subject: subject, Err: err}
		}
		return mensageria.Unavailable(err)
	case hasAPI && (ae.ErrorCode == codeStreamStoreFailed || ae.Code >= 500),
		routeLevel(err):
		return mensageria.Unavailable(err)
	}
	return err
}

// routeLevel reports a failure of the connection or of the server rather
// than of a message.
func routeLevel(err error) bool {
	var ne *NoAckError
	return errors.As(err, &ne) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, natsgo.ErrTimeout) ||
		errors.Is(err, natsgo.ErrNoResponders) ||
		errors.Is(err, natsgo.ErrConnectionClosed) ||
		errors.Is(err, natsgo.ErrConnectionDraining) ||
		errors.Is(err, natsgo.ErrConnectionReconnecting) ||
		errors.Is(err, natsgo.ErrDisconnected) ||
		errors.Is(err, natsgo.ErrNoServers) ||
		errors.Is(err, natsgo.ErrAuthorization) ||
		errors.Is(err, natsgo.ErrAuthExpired) ||
		errors.Is(err, natsgo.ErrAuthRevoked) ||
		errors.Is(err, natsgo.ErrPermissionViolation) ||
		errors.Is(err, natsgo.ErrSlowConsumer) ||
		errors.Is(err, jetstream.ErrTooManyStalledMsgs) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount)
}
