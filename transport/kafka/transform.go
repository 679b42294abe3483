package kafka

import (
	"context"
	"log/slog"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Transform maps one consumed record to the records to produce (none, to
// drop it). It must not have effects outside Kafka: an aborted transaction
// is consumed again, and only what was produced inside it is rolled back.
type Transform func(ctx context.Context, r *kgo.Record) ([]*kgo.Record, error)

// TransformerConfig configures a Transformer.
type TransformerConfig struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Opts are extra client options.
	Opts []kgo.Opt
	// Group is the consumer group whose offsets commit inside the
	// transactions. Required.
	Group string
	// Topics are consumed. Required.
	Topics []string
	// TransactionalID is stable per replica slot and unique among the
	// group's live members (for example the group plus a pod ordinal).
	// Required.
	TransactionalID string
	// Transform maps records. Required.
	Transform Transform
	// MaxPollRecords bounds one transaction. Default 500.
	MaxPollRecords int
	// Logger receives aborts. Default slog.Default().
	Logger *slog.Logger
}

// Transformer consumes, transforms and produces inside Kafka, exactly once
// for read_committed consumers of its output: each poll's output records
// and the consumed offsets commit in one Kafka transaction (franz-go's
// GroupTransactSession), and a rebalance or failure before the commit
// aborts both, rewinding to the last committed offsets.
//
// The boundary is the cluster. A Transform that calls a payment API, sends
// an e-mail or writes to a database repeats that call whenever a
// transaction aborts; such effects need an idempotency key at their
// destination, or a Sink.
type Transformer struct {
	cfg  TransformerConfig
	sess *kgo.GroupTransactSession
	log  *slog.Logger

	mu                 sync.Mutex
	committed, aborted int64
}

// NewTransformer validates cfg and builds the session.
func NewTransformer(cfg TransformerConfig) (*Transformer, error) {
	switch {
	case len(cfg.Brokers) == 0:
		return nil, &ConfigError{Field: "Brokers", Reason: "required"}
	case cfg.Group == "":
		return nil, &ConfigError{Field: "Group", Reason: "required"}
	case len(cfg.Topics) == 0:
		return nil, &ConfigError{Field: "Topics", Reason: "required"}
	case cfg.TransactionalID == "":
		return nil, &ConfigError{Field: "TransactionalID", Reason: "required"}
	case cfg.Transform == nil:
		return nil, &ConfigError{Field: "Transform", Reason: "required"}
	}
	if cfg.MaxPollRecords <= 0 {
		cfg.MaxPollRecords = 500
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, cfg.Opts...)
	opts = append(opts,
		kgo.TransactionalID(cfg.TransactionalID),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
	)
	sess, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		return nil, &ConfigError{Field: "Opts", Reason: err.Error()}
	}
	return &Transformer{cfg: cfg, sess: sess, log: cfg.Logger.With("transactional_id", cfg.TransactionalID)}, nil
}

// Stats returns how many transactions committed and aborted.
func (t *Transformer) Stats() (committed, aborted int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.committed, t.aborted
}

// Run transforms until ctx ends or the session fails for good.
func (t *Transformer) Run(ctx context.Context) error {
	defer t.sess.Close()
	for {
		fs := t.sess.PollRecords(ctx, t.cfg.MaxPollRecords)
		if ctx.Err() != nil {
			return nil
		}
		if fs.IsClientClosed() {
			return ErrClosed
		}
		fs.EachError(func(tp string, p int32, err error) {
			t.log.Warn("fetch failed", "topic", tp, "partition", p, "err", err)
		})
		if fs.NumRecords() == 0 {
			continue
		}
		if err := t.sess.Begin(); err != nil {
			return err
		}
		var (
			mu   sync.Mutex
			ferr error
		)
		fail := func(err error) {
			mu.Lock()
			if ferr == nil {
				ferr = err
			}
			mu.Unlock()
		}
		fs.EachRecord(func(r *kgo.Record) {
			mu.Lock()
			stop := ferr != nil
			mu.Unlock()
			if stop {
				return
			}
			outs, err := t.cfg.Transform(ctx, r)
			if err != nil {
				fail(err)
				return
			}
			for _, o := range outs {
				t.sess.Produce(ctx, o, func(_ *kgo.Record, err error) {
					if err != nil {
						fail(err)
					}
				})
			}
		})
		// A stop in the middle of a batch aborts it: the next owner of the
		// partitions redoes the whole batch.
		if err := t.sess.Client().Flush(ctx); err != nil {
			fail(err)
		}
		mu.Lock()
		commit := ferr == nil && ctx.Err() == nil
		mu.Unlock()
		committed, err := t.sess.End(context.WithoutCancel(ctx), kgo.TransactionEndTry(commit))
		t.mu.Lock()
		if committed {
			t.committed++
		} else {
			t.aborted++
		}
		t.mu.Unlock()
		if err != nil {
			return err
		}
		if !committed {
			mu.Lock()
			cause := ferr
			mu.Unlock()
			t.log.Warn("transaction aborted; the records will be consumed again", "err", cause)
		}
	}
}
