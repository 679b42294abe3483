package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/m2mbatch"
)

// Effect applies one record inside the sink's database transaction, the
// one that also stores the record's offset. Returning an error rolls both
// back; mensageria.Permanent(err) skips the record instead (its offset is
// stored, the effect is not), for records no retry can fix.
type Effect func(ctx context.Context, tx mensageria.Tx, r *kgo.Record) error

// SinkConfig configures a Sink.
type SinkConfig struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Opts are extra client options (SASL, TLS, session timeouts).
	Opts []kgo.Opt
	// Group is the consumer group that shares the partitions between
	// replicas. Required.
	Group string
	// Topics are consumed. Required.
	Topics []string
	// Consumer names the effect's positions in the database offsets table.
	// Default: Group.
	Consumer string
	// Driver is the database the effect writes to. Required.
	Driver driver.Driver
	// Effect applies a record. Required.
	Effect Effect
	// MaxPollRecords bounds one poll, and so one database transaction per
	// partition. Default 500.
	MaxPollRecords int
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
	Topic     string
	Partition int32
	Applied   int
	Skipped   int
	// Duration is the transaction's, effects included.
	Duration time.Duration
}

// Sink consumes Kafka into the database with the offsets kept in the
// database: each partition's records of a poll and the last offset applied
// commit in one transaction, and every partition assignment (start,
// rebalance) seeks to the offsets stored there, not to Kafka's. Records at
// or below the stored offset are skipped, so a record is applied once even
// when Kafka hands it out again. It reads with read_committed, so aborted
// transactional records are never applied.
//
// Nothing is committed to Kafka: the group's lag as Kafka reports it is
// meaningless for this consumer; watch the offsets table instead.
type Sink struct {
	cfg SinkConfig
	cl  *kgo.Client
	log *slog.Logger

	applied, skipped, poisoned atomic.Int64
}

// NewSink validates cfg and builds the consuming client; Run starts it.
func NewSink(cfg SinkConfig) (*Sink, error) {
	switch {
	case len(cfg.Brokers) == 0:
		return nil, &ConfigError{Field: "Brokers", Reason: "required"}
	case cfg.Group == "":
		return nil, &ConfigError{Field: "Group", Reason: "required"}
	case len(cfg.Topics) == 0:
		return nil, &ConfigError{Field: "Topics", Reason: "required"}
	case cfg.Driver == nil:
		return nil, &ConfigError{Field: "Driver", Reason: "required"}
	case cfg.Effect == nil:
		return nil, &ConfigError{Field: "Effect", Reason: "required"}
	case cfg.MaxPollRecords < 0:
		return nil, &ConfigError{Field: "MaxPollRecords", Reason: "must not be negative"}
	}
	if cfg.Consumer == "" {
		cfg.Consumer = cfg.Group
	}
	if cfg.MaxPollRecords == 0 {
		cfg.MaxPollRecords = 500
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Sink{cfg: cfg, log: cfg.Logger.With("consumer", cfg.Consumer)}
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, cfg.Opts...)
	opts = append(opts,
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DisableAutoCommit(),
		// A partition is handed to another member only between polls, so
		// two members never apply the same partition at once.
		kgo.BlockRebalanceOnPoll(),
		kgo.AdjustFetchOffsetsFn(s.storedOffsets),
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, &ConfigError{Field: "Opts", Reason: err.Error()}
	}
	s.cl = cl
	return s, nil
}

// Applied counts records whose effect committed; Skipped those at or below
// a stored offset; Poisoned those skipped because the effect returned a
// permanent error.
func (s *Sink) Applied() int64 { return s.applied.Load() }

// Skipped counts records at or below a stored offset.
func (s *Sink) Skipped() int64 { return s.skipped.Load() }

// Poisoned counts records skipped after a permanent effect error.
func (s *Sink) Poisoned() int64 { return s.poisoned.Load() }

// Client returns the consuming client.
func (s *Sink) Client() *kgo.Client { return s.cl }

// storedOffsets replaces the group's offsets by the database's, for every
// partition this member was just assigned.
func (s *Sink) storedOffsets(ctx context.Context, in map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	err := s.cfg.Driver.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		// In order: reading a position can lock it, and two members must
		// never take the same locks in opposite orders.
		for _, topic := range slices.Sorted(maps.Keys(in)) {
			parts := in[topic]
			for _, p := range slices.Sorted(maps.Keys(parts)) {
				off, ok, err := tx.Offset(ctx, s.cfg.Consumer, topic, p)
				if err != nil {
					return err
				}
				if ok {
					// The epoch is cleared: it belongs to Kafka's own
					// commit, and data-loss detection would misread it.
					parts[p] = kgo.NewOffset().At(off + 1).WithEpoch(-1)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("mensageria/kafka: read stored offsets: %w", err)
	}
	return in, nil
}

// Run consumes until ctx ends, then leaves the group and closes the client.
// It returns nil on a cancelled ctx, or the error that stopped it.
func (s *Sink) Run(ctx context.Context) error {
	defer s.cl.Close()
	for {
		fs := s.cl.PollRecords(ctx, s.cfg.MaxPollRecords)
		if ctx.Err() != nil {
			s.cl.AllowRebalance()
			return nil
		}
		if fs.IsClientClosed() {
			return ErrClosed
		}
		fs.EachError(func(t string, p int32, err error) {
			s.log.Warn("fetch failed", "topic", t, "partition", p, "err", err)
		})
		var runErr error
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if runErr != nil || len(p.Records) == 0 {
				return
			}
			runErr = s.applyPartition(ctx, p.Topic, p.Partition, p.Records)
		})
		s.cl.AllowRebalance()
		if runErr != nil {
			if ctx.Err() != nil {
				return nil
			}
			return runErr
		}
	}
}

// applyPartition commits the records of one partition in one transaction;
// when an effect fails, the rule of m2mbatch isolates the record:
// the records before it commit on their own, it is retried alone with
// backoff, or skipped when its failure is permanent.
func (s *Sink) applyPartition(ctx context.Context, topic string, part int32, recs []*kgo.Record) error {
	return m2mbatch.Apply(ctx, recs, m2mbatch.Policy[*kgo.Record]{
		Commit: func(ctx context.Context, recs []*kgo.Record) error {
			return s.apply(ctx, topic, part, recs)
		},
		Poison: func(ctx context.Context, r *kgo.Record, err error) error {
			s.log.Error("effect failed permanently; skipping the record", "topic", topic, "partition", part, "offset", r.Offset, "err", err)
			return s.skip(ctx, topic, part, r)
		},
		Permanent:  mensageria.IsPermanent,
		Backoff:    s.cfg.RetryBackoff,
		MaxBackoff: 30 * time.Second,
		Retrying: func(err error, attempt int, pending []*kgo.Record) {
			s.log.Warn("sink transaction failed; retrying", "topic", topic, "partition", part, "offset", pending[0].Offset, "records", len(pending), "attempt", attempt, "err", err)
		},
	})
}

func (s *Sink) apply(ctx context.Context, topic string, part int32, recs []*kgo.Record) error {
	var applied, skipped int64
	start := time.Now()
	err := s.cfg.Driver.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		applied, skipped = 0, 0
		stored, ok, err := tx.Offset(ctx, s.cfg.Consumer, topic, part)
		if err != nil {
			return err
		}
		last := int64(-1)
		for i, r := range recs {
			if ok && r.Offset <= stored {
				skipped++
				continue
			}
			if err := s.cfg.Effect(ctx, tx, r); err != nil {
				return &m2mbatch.ItemError{Index: i, Err: fmt.Errorf("offset %d: %w", r.Offset, err)}
			}
			applied++
			last = r.Offset
		}
		if last < 0 {
			return nil
		}
		return tx.SetOffset(ctx, s.cfg.Consumer, topic, part, last)
	})
	if err != nil {
		return err
	}
	s.applied.Add(applied)
	s.skipped.Add(skipped)
	if s.cfg.OnBatch != nil {
		s.cfg.OnBatch(BatchStats{Topic: topic, Partition: part, Applied: int(applied), Skipped: int(skipped), Duration: time.Since(start)})
	}
	return nil
}

// skip stores the offset of a poisoned record without its effect.
func (s *Sink) skip(ctx context.Context, topic string, part int32, r *kgo.Record) error {
	err := s.cfg.Driver.InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
		stored, ok, err := tx.Offset(ctx, s.cfg.Consumer, topic, part)
		if err != nil || (ok && r.Offset <= stored) {
			return err
		}
		return tx.SetOffset(ctx, s.cfg.Consumer, topic, part, r.Offset)
	})
	if err == nil {
		s.poisoned.Add(1)
	}
	return err
}
