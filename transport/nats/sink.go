package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/m2mbatch"
	"github.com/xadm/mensageria/m2mwire"
)

// Effect applies one message inside the sink's database transaction, the
// one that also stores the message's stream sequence. An error rolls both
// back and the message is retried alone, after the messages before it
// commit; mensageria.Permanent(err) skips the message instead (its
// sequence is stored, the effect is not).
type Effect func(ctx context.Context, tx mensageria.Tx, m jetstream.Msg) error

// SinkConfig configures a Sink.
type SinkConfig struct {
	// Conn is the NATS connection. Required.
	Conn *natsgo.Conn
	// Stream is consumed. Required.
	Stream string
	// Consumer names the durable consumer and the position stored in the
	// database. One Sink per name may run at a time. Required.
	Consumer string
	// FilterSubjects narrows the stream. Default: all of it.
	FilterSubjects []string
	// Driver is the database the effect writes to. Required.
	Driver driver.Driver
	// Effect applies a message. Required.
	Effect Effect
	// Batch bounds one fetch, and so one database transaction. Default 100.
	Batch int
	// MaxWait is how long a fetch waits for messages. Default 1s.
	MaxWait time.Duration
	// AckWait is the consumer's ack wait. Default 30s.
	AckWait time.Duration
	// RetryBackoff is the first wait after a failed transaction; it
	// doubles up to 30s. Default 200ms.
	RetryBackoff time.Duration
	// Logger receives failures. Default slog.Default().
	Logger *slog.Logger
	// OnBatch, when set, is called after each committed transaction, for
	// metrics. It must not block.
	OnBatch func(BatchStats)
}

// BatchStats describes one committed sink transaction.
type BatchStats struct {
	Stream   string
	Applied  int           // messages whose effect committed
	Skipped  int           // messages at or below the stored sequence
	Duration time.Duration // the transaction, retries excluded
}

// Sink consumes a JetStream stream into the database: a fetched batch's
// effects and the last stream sequence applied commit in one transaction,
// and the messages are acknowledged after that commit. Sequences at or
// below the stored one are skipped (and acknowledged), so a redelivery is
// never applied twice.
//
// The database, not the consumer's ack floor, is the position: on start the
// durable consumer is recreated to deliver from the stored sequence + 1,
// and a gap in the consumer's delivery sequence (a delivery lost in
// transit, which would otherwise be redelivered after newer ones and then
// skipped) makes the sink recreate it from the stored sequence again.
type Sink struct {
	cfg SinkConfig
	js  jetstream.JetStream
	log *slog.Logger

	applied, skipped, poisoned, resets atomic.Int64

	// afterCommit runs between a batch's commit and its acks; tests crash
	// there.
	afterCommit func()
}

// NewSink validates cfg; Run starts consuming.
func NewSink(cfg SinkConfig) (*Sink, error) {
	switch {
	case cfg.Conn == nil:
		return nil, &ConfigError{Field: "Conn", Reason: "required"}
	case cfg.Stream == "":
		return nil, &ConfigError{Field: "Stream", Reason: "required"}
	case cfg.Consumer == "":
		return nil, &ConfigError{Field: "Consumer", Reason: "required"}
	case cfg.Driver == nil:
		return nil, &ConfigError{Field: "Driver", Reason: "required"}
	case cfg.Effect == nil:
		return nil, &ConfigError{Field: "Effect", Reason: "required"}
	case cfg.Batch < 0:
		return nil, &ConfigError{Field: "Batch", Reason: "must not be negative"}
	}
	if cfg.Batch == 0 {
		cfg.Batch = 100
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = time.Second
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = 30 * time.Second
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("mensageria/nats: jetstream: %w", err)
	}
	return &Sink{cfg: cfg, js: js, log: cfg.Logger.With("stream", cfg.Stream, "consumer", cfg.Consumer)}, nil
}

// Applied counts messages whose effect committed.
func (s *Sink) Applied() int64 { return s.applied.Load() }

// Skipped counts messages at or below the stored sequence.
func (s *Sink) Skipped() int64 { return s.skipped.Load() }

// Poisoned counts messages skipped after a permanent effect error.
func (s *Sink) Poisoned() int64 { return s.poisoned.Load() }

// Resets counts consumer recreations after a delivery gap.
func (s *Sink) Resets() int64 { return s.resets.Load() }

func (s *Sink) stored(ctx context.Context) (uint64, bool, error) {
	var (
		off int64
		ok  bool
	)
	err := s.cfg.Driver.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		var err error
		off, ok, err = tx.Offset(ctx, s.cfg.Consumer, s.cfg.Stream, 0)
		return err
	})
	return uint64(off), ok, err
}

// consumer (re)creates the durable consumer at the stored position.
func (s *Sink) consumer(ctx context.Context) (jetstream.Consumer, error) {
	seq, ok, err := s.stored(ctx)
	if err != nil {
		return nil, fmt.Errorf("mensageria/nats: read stored sequence: %w", err)
	}
	st, err := s.js.Stream(ctx, s.cfg.Stream)
	if err != nil {
		return nil, fmt.Errorf("mensageria/nats: stream %q: %w", s.cfg.Stream, err)
	}
	if err := st.DeleteConsumer(ctx, s.cfg.Consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("mensageria/nats: reset consumer %q: %w", s.cfg.Consumer, err)
	}
	cc := jetstream.ConsumerConfig{
		Durable:        s.cfg.Consumer,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        s.cfg.AckWait,
		MaxDeliver:     -1, // a message is never given up on: that would be a loss
		MaxAckPending:  4 * s.cfg.Batch,
		FilterSubjects: s.cfg.FilterSubjects,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	}
	if ok {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, seq+1
	}
	c, err := st.CreateConsumer(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("mensageria/nats: create consumer %q: %w", s.cfg.Consumer, err)
	}
	return c, nil
}

// Run consumes until ctx ends; it returns nil then, or the error that
// stopped it.
func (s *Sink) Run(ctx context.Context) error {
	cons, err := s.consumer(ctx)
	if err != nil {
		return err
	}
	var lastDelivery uint64 // consumer sequence of the last delivery seen
	for {
		if ctx.Err() != nil {
			return nil
		}
		b, err := cons.Fetch(s.cfg.Batch, jetstream.FetchMaxWait(s.cfg.MaxWait))
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("mensageria/nats: fetch: %w", err)
		}
		var (
			msgs []jetstream.Msg
			gap  bool
		)
		for m := range b.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("mensageria/nats: message metadata: %w", err)
			}
			if gap || md.Sequence.Consumer != lastDelivery+1 {
				gap = true // ignore the rest; they come again after the reset
				continue
			}
			lastDelivery = md.Sequence.Consumer
			msgs = append(msgs, m)
		}
		if err := b.Error(); err != nil && !errors.Is(err, natsgo.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			if ctx.Err() != nil {
				return nil
			}
			s.log.Warn("fetch ended with an error", "err", err)
		}
		if len(msgs) > 0 {
			if err := s.applyBatch(ctx, msgs); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		if gap {
			s.resets.Add(1)
			s.log.Warn("delivery gap; recreating the consumer at the stored sequence")
			if cons, err = s.consumer(ctx); err != nil {
				return err
			}
			lastDelivery = 0
		}
	}
}

// applyBatch commits msgs by the rule of m2mbatch: in one
// transaction, or, when an effect fails, the messages before it in one of
// their own and the failing one alone, retried with backoff or skipped
// when its failure is permanent. Messages are acknowledged only after the
// commit that applied or skipped them, and kept in progress while a retry
// waits, so the server does not redeliver them to no one.
func (s *Sink) applyBatch(ctx context.Context, msgs []jetstream.Msg) error {
	return m2mbatch.Apply(ctx, msgs, m2mbatch.Policy[jetstream.Msg]{
		Commit: s.apply,
		Committed: func(msgs []jetstream.Msg) {
			if s.afterCommit != nil {
				s.afterCommit()
			}
			// A lost ack only means a redelivery, which is skipped.
			for _, m := range msgs {
				_ = m.Ack()
			}
		},
		Poison: func(ctx context.Context, m jetstream.Msg, err error) error {
			if err := s.skip(ctx, m); err != nil {
				return err
			}
			s.log.Error("effect failed permanently; skipping the message", "err", err)
			return nil
		},
		Permanent:  mensageria.IsPermanent,
		Backoff:    s.cfg.RetryBackoff,
		MaxBackoff: 30 * time.Second,
		Retrying: func(err error, attempt int, pending []jetstream.Msg) {
			s.log.Warn("sink transaction failed; retrying", "messages", len(pending), "attempt", attempt, "err", err)
			for _, m := range pending {
				_ = m.InProgress()
			}
		},
	})
}

func (s *Sink) apply(ctx context.Context, msgs []jetstream.Msg) error {
	var applied, skipped int64
	start := time.Now()
	err := s.cfg.Driver.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		applied, skipped = 0, 0
		stored, ok, err := tx.Offset(ctx, s.cfg.Consumer, s.cfg.Stream, 0)
		if err != nil {
			return err
		}
		last := int64(-1)
		for i, m := range msgs {
			md, err := m.Metadata()
			if err != nil {
				return err
			}
			seq := int64(md.Sequence.Stream)
			if ok && seq <= stored {
				skipped++
				continue
			}
			if err := s.cfg.Effect(ctx, tx, m); err != nil {
				return &m2mbatch.ItemError{Index: i, Err: fmt.Errorf("stream sequence %d: %w", seq, err)}
			}
			applied++
			last = seq
		}
		if last < 0 {
			return nil
		}
		return tx.SetOffset(ctx, s.cfg.Consumer, s.cfg.Stream, 0, last)
	})
	if err != nil {
		return err
	}
	s.applied.Add(applied)
	s.skipped.Add(skipped)
	if s.cfg.OnBatch != nil {
		s.cfg.OnBatch(BatchStats{Stream: s.cfg.Stream, Applied: int(applied), Skipped: int(skipped), Duration: time.Since(start)})
	}
	return nil
}

func (s *Sink) skip(ctx context.Context, m jetstream.Msg) error {
	md, err := m.Metadata()
	if err != nil {
		return err
	}
	err = s.cfg.Driver.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		stored, ok, err := tx.Offset(ctx, s.cfg.Consumer, s.cfg.Stream, 0)
		if err != nil || (ok && int64(md.Sequence.Stream) <= stored) {
			return err
		}
		return tx.SetOffset(ctx, s.cfg.Consumer, s.cfg.Stream, 0, int64(md.Sequence.Stream))
	})
	if err == nil {
		s.poisoned.Add(1)
		_ = m.Ack()
	}
	return err
}

// DeliveryOf rebuilds the mensageria delivery a Sender published, so a
// plain JetStream consumer can apply it through a mensageria.Inbox. The
// message is outside input: one that no Sender published, or one damaged
// on the way, gets a *mensageria.DecodeError.
func DeliveryOf(m jetstream.Msg) (*mensageria.Delivery, error) {
	d, err := deliveryFrom(m.Headers(), m.Data())
	if err != nil {
		return nil, err
	}
	if md, err := m.Metadata(); err == nil {
		d.Attempt = int(md.NumDelivered)
		d.Seq = int64(md.Sequence.Stream)
	}
	return d, nil
}

// deliveryFrom is DeliveryOf without the server's metadata. Headers other
// than the Sender's own and the server's (Nats-*) are the delivery's.
func deliveryFrom(h natsgo.Header, data []byte) (*mensageria.Delivery, error) {
	bad := func(field, reason string) error {
		return &mensageria.DecodeError{Transport: "nats", Field: field, Reason: reason}
	}
	raw := h.Get(HeaderMessageID)
	if raw == "" {
		return nil, bad(HeaderMessageID, "missing: not published by a mensageria Sender")
	}
	id, err := uuid.Parse(raw)
	if err != nil {
		return nil, bad(HeaderMessageID, err.Error())
	}
	d := &mensageria.Delivery{ID: id, Type: h.Get(HeaderType), Key: h.Get(HeaderKey), Payload: data}
	if d.Type == "" {
		return nil, bad(HeaderType, "missing or empty")
	}
	if v := h.Get(HeaderCreatedAt); v != "" {
		if d.CreatedAt, err = m2mwire.ParseTime(v); err != nil {
			return nil, bad(HeaderCreatedAt, err.Error())
		}
	}
	for k, vs := range h {
		switch {
		case len(vs) == 0, k == HeaderMessageID, k == HeaderType, k == HeaderKey, k == HeaderCreatedAt,
			strings.HasPrefix(k, "Nats-"):
			continue
		}
		if d.Headers == nil {
			d.Headers = map[string]string{}
		}
		d.Headers[k] = vs[0]
	}
	return d, nil
}
