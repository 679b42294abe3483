package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/m2mwire"
)

// Header names set by the Sender besides Nats-Msg-Id.
const (
	HeaderMessageID = "Mensageria-Id"
	HeaderType      = "Mensageria-Type"
	HeaderKey       = "Mensageria-Key"
	HeaderCreatedAt = "Mensageria-Created-At"
)

// ConfigError names the config field that is wrong; it wraps
// mensageria.ErrConfig.
type ConfigError = mensageria.ConfigError

// SenderConfig configures a Sender.
type SenderConfig struct {
	// Conn is the NATS connection. Required.
	Conn *natsgo.Conn
	// Subject receives every message. Required unless SubjectFor is set.
	Subject string
	// SubjectFor picks the subject per delivery (for example one per key).
	// Default: Subject.
	SubjectFor func(*mensageria.Delivery) string
	// Stream is the stream the subjects belong to. When set, every publish
	// expects it (a subject moved to another stream fails instead of
	// landing there) and NewSender runs Check. Optional.
	Stream string
	// Horizon is the longest time between the first attempt to publish a
	// message and its last redelivery by the relay. Check warns when it
	// exceeds the stream's duplicate window. A Sender registered with a
	// Client needs none: Start hands it the relay's own retry horizon
	// (UseRelaySettings), which replaces this figure, and checks the
	// window then. For a Sender driven by something else, RetryHorizon
	// computes it from a config.
	Horizon time.Duration
	// WithoutMsgID publishes without Nats-Msg-Id: every redelivery is
	// stored. For measuring what the header costs; never in production.
	WithoutMsgID bool
	// Logger receives the duplicate window's warning, and the check at
	// Start when the server cannot be asked. An outage of the server is
	// the relay's to log, once when its route pauses and once when it
	// resumes. Default slog.Default().
	Logger *slog.Logger
}

// Sender publishes deliveries to JetStream and waits for the stream's
// acknowledgement.
type Sender struct {
	cfg        SenderConfig
	js         jetstream.JetStream
	subjectFor func(*mensageria.Delivery) string
	// horizon starts as cfg.Horizon and becomes the relay's retry horizon
	// at Start; Check may run meanwhile.
	horizon atomic.Int64
}

// NewSender validates cfg and, when Stream is set, runs Check.
func NewSender(ctx context.Context, cfg SenderConfig) (*Sender, error) {
	if cfg.Conn == nil {
		return nil, &ConfigError{Field: "Conn", Reason: "required"}
	}
	subjectFor := cfg.SubjectFor
	if subjectFor == nil {
		if cfg.Subject == "" {
			return nil, &ConfigError{Field: "Subject", Reason: "required (or set SubjectFor)"}
		}
		subject := cfg.Subject
		subjectFor = func(*mensageria.Delivery) string { return subject }
	}
	if cfg.Horizon < 0 {
		return nil, &ConfigError{Field: "Horizon", Reason: "must not be negative"}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("mensageria/nats: jetstream: %w", err)
	}
	s := &Sender{cfg: cfg, js: js, subjectFor: subjectFor}
	s.horizon.Store(int64(cfg.Horizon))
	if cfg.Stream != "" {
		if _, err := s.Check(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// DuplicateWindowReport is what Check found.
type DuplicateWindowReport struct {
	Stream string
	// DuplicateWindow is the stream's Duplicates setting.
	DuplicateWindow time.Duration
	// Horizon is the configured retry horizon.
	Horizon time.Duration
	// Covered is false when a redelivery can come after the window, where
	// only the receiver's inbox can absorb it.
	Covered bool
}

// Check reads the stream's duplicate window and warns (through the
// Logger) when the retry horizon is longer: past the window the server
// stores a redelivery as a new message. The stream is Stream, or the one
// that holds Subject when Stream is not set. A stream that does not
// exist, a subject no stream holds, or a server without JetStream is a
// *StreamError naming it; a server that does not answer within ctx, the
// client's error.
func (s *Sender) Check(ctx context.Context) (DuplicateWindowReport, error) {
	name, err := s.streamName(ctx)
	if err != nil {
		return DuplicateWindowReport{}, err
	}
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		if missing(err) {
			return DuplicateWindowReport{}, &StreamError{Stream: name, Subject: s.cfg.Subject, Err: err}
		}
		return DuplicateWindowReport{}, fmt.Errorf("mensageria/nats: stream %q: %w", name, err)
	}
	info := st.CachedInfo()
	horizon := time.Duration(s.horizon.Load())
	r := DuplicateWindowReport{Stream: name, DuplicateWindow: info.Config.Duplicates, Horizon: horizon}
	r.Covered = horizon <= r.DuplicateWindow
	if !r.Covered {
		s.cfg.Logger.Warn("the relay can redeliver after the stream's duplicate window; the server will store such a redelivery again and only the receivers' inboxes absorb it (widen the window to the retry horizon, or shorten the relay's retries)",
			"stream", r.Stream, "duplicate_window", r.DuplicateWindow, "retry_horizon", r.Horizon)
	}
	return r, nil
}

// streamName is the stream Check reads.
func (s *Sender) streamName(ctx context.Context) (string, error) {
	if s.cfg.Stream != "" {
		return s.cfg.Stream, nil
	}
	if s.cfg.SubjectFor != nil || s.cfg.Subject == "" {
		return "", &ConfigError{Field: "Stream", Reason: "Check needs the stream name when the subject is picked per delivery"}
	}
	name, err := s.js.StreamNameBySubject(ctx, s.cfg.Subject)
	if err != nil {
		if missing(err) {
			return "", &StreamError{Subject: s.cfg.Subject, Err: err}
		}
		if errors.Is(err, natsgo.ErrNoResponders) {
			// Nothing answers JetStream's API on this connection.
			return "", &StreamError{Subject: s.cfg.Subject, Err: jetstream.ErrJetStreamNotEnabled}
		}
		return "", fmt.Errorf("mensageria/nats: the stream of subject %q: %w", s.cfg.Subject, err)
	}
	return name, nil
}

// missing reports the server's answers that a stream is not there to
// publish to: it does not exist, or JetStream is off.
func missing(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount)
}

// checkTimeout bounds the window check at Start.
const checkTimeout = 10 * time.Second

// UseRelaySettings implements mensageria.RelayAware: Client.Start calls
// it with the relay's effective timing. The relay's retry horizon
// replaces SenderConfig.Horizon, and the stream (Stream, or the one that
// holds Subject) is checked: one that does not exist, a subject no stream
// holds, or a server without JetStream fails Start with a *StreamError
// naming it, and a duplicate window shorter than the horizon is warned
// about, naming both figures. A server that does not answer now does not
// fail Start: that is logged once, and the messages wait in the outbox
// while the relay's route breaker pauses the route.
func (s *Sender) UseRelaySettings(rs mensageria.RelaySettings) error {
	if rs.RetryHorizon > 0 {
		s.horizon.Store(int64(rs.RetryHorizon))
	}
	if s.cfg.Stream == "" && s.cfg.SubjectFor != nil {
		s.cfg.Logger.Info("the stream is not checked, nor its duplicate window: the subject is picked per delivery and SenderConfig.Stream is not set",
			"retry_horizon", rs.RetryHorizon)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if _, err := s.Check(ctx); err != nil {
		var se *StreamError
		if errors.As(err, &se) {
			return err
		}
		s.cfg.Logger.Warn(s.Destination()+" could not be checked at start; the relay starts anyway, its messages wait in the outbox without spending attempts, and its route pauses until the server answers",
			"destination", s.Destination(), "err", err)
	}
	return nil
}

// Destination implements mensageria.DestinationNamer: "nats subject s",
// or the stream when the subject is picked per delivery.
func (s *Sender) Destination() string {
	switch {
	case s.cfg.SubjectFor == nil:
		return "nats subject " + s.cfg.Subject
	case s.cfg.Stream != "":
		return "nats stream " + s.cfg.Stream
	}
	return "nats (subject per delivery)"
}

// RetryHorizon is the longest span between a message's first delivery
// attempt and its last under cfg (the effective config, Client.Config()):
// every attempt may run up to the lease, and the waits between them are
// the capped exponential backoff.
func RetryHorizon(cfg mensageria.Config) time.Duration {
	lease, base, maxB, attempts := cfg.Lease, cfg.BackoffBase, cfg.BackoffMax, cfg.MaxAttempts
	if lease == 0 {
		lease = mensageria.DefaultLease
	}
	if base == 0 {
		base = mensageria.DefaultBackoffBase
	}
	if maxB == 0 {
		maxB = mensageria.DefaultBackoffMax
	}
	if attempts == 0 {
		attempts = mensageria.DefaultMaxAttempts
	}
	h := time.Duration(attempts) * lease
	d := base
	for a := 1; a < attempts; a++ {
		h += min(d, maxB)
		if d < maxB {
			d *= 2
		}
	}
	return h
}

// Send publishes one message.
func (s *Sender) Send(ctx context.Context, d *mensageria.Delivery) error {
	if errs := s.SendBatch(ctx, []*mensageria.Delivery{d}); errs != nil {
		return errs[0]
	}
	return nil
}

// SendBatch publishes every message asynchronously and waits for each
// acknowledgement, or for ctx to end. A duplicate acknowledgement (the
// server had the message id already) is a success: the stream has the
// message. A message JetStream refuses for good (larger than the server
// allows) comes back Permanent; a failure of the destination (no stream
// for the subject, the stream missing or full, the server unreachable, no
// acknowledgement before ctx's deadline) comes back mensageria.Unavailable;
// the others are plain errors the relay retries.
func (s *Sender) SendBatch(ctx context.Context, ds []*mensageria.Delivery) []error {
	start := time.Now()
	errs := make([]error, len(ds))
	subjects := make([]string, len(ds))
	futs := make([]jetstream.PubAckFuture, len(ds))
	var opts []jetstream.PublishOpt
	if s.cfg.Stream != "" {
		opts = append(opts, jetstream.WithExpectStream(s.cfg.Stream))
	}
	for i, d := range ds {
		m := s.toMsg(d)
		subjects[i] = m.Subject
		f, err := s.js.PublishMsgAsync(m, opts...)
		if err != nil {
			errs[i] = err
			continue
		}
		futs[i] = f
	}
	for i, f := range futs {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			errs[i] = err
		case <-ctx.Done():
			errs[i] = &NoAckError{Subject: subjects[i], Waited: time.Since(start), Cause: s.connState(), ctxErr: ctx.Err()}
		}
	}
	var out []error
	for i, err := range errs {
		if err == nil {
			continue
		}
		if out == nil {
			out = make([]error, len(ds))
		}
		out[i] = classify(s.cfg.Stream, subjects[i], err)
	}
	return out
}

// connState describes a connection that is not connected, nil otherwise.
func (s *Sender) connState() error {
	nc := s.cfg.Conn
	if nc.IsConnected() {
		return nil
	}
	if last := nc.LastError(); last != nil {
		return fmt.Errorf("mensageria/nats: not connected to the server (%s; last error: %w)", nc.Status(), last)
	}
	return fmt.Errorf("mensageria/nats: not connected to the server (%s)", nc.Status())
}

func (s *Sender) toMsg(d *mensageria.Delivery) *natsgo.Msg {
	m := natsgo.NewMsg(s.subjectFor(d))
	m.Data = d.Payload
	for k, v := range d.Headers {
		m.Header.Set(k, v)
	}
	if !s.cfg.WithoutMsgID {
		m.Header.Set(jetstream.MsgIDHeader, d.ID.String())
	}
	m.Header.Set(HeaderMessageID, d.ID.String())
	m.Header.Set(HeaderType, d.Type)
	m.Header.Set(HeaderKey, d.Key)
	if !d.CreatedAt.IsZero() {
		m.Header.Set(HeaderCreatedAt, string(m2mwire.AppendTime(nil, d.CreatedAt)))
	}
	return m
}

var (
	_ mensageria.BatchSender      = (*Sender)(nil)
	_ mensageria.RelayAware       = (*Sender)(nil)
	_ mensageria.DestinationNamer = (*Sender)(nil)
)
