package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
)

// DefaultPositionsTopic holds the outbox positions of transactional relays,
// one compacted record per transactional id.
const DefaultPositionsTopic = "mensageria.relay-positions"

// TransactionalConfig configures a TransactionalSender.
type TransactionalConfig struct {
	// Brokers are the seed brokers. Required.
	Brokers []string
	// Opts are extra client options (SASL, TLS, logging). They must not
	// set a transactional id; TransactionalID does.
	Opts []kgo.Opt
	// TransactionalID names this app's relay to the transaction
	// coordinator. It must be stable across restarts and the same on every
	// replica of the app (for example "mensageria-relay-" + app), and
	// different between apps: a new producer with the id fences the old
	// one, which is what makes a crashed or paused relay harmless.
	// Required.
	TransactionalID string
	// Topic receives every message. Required unless TopicFor is set.
	Topic string
	// TopicFor picks the topic per delivery. Default: Topic.
	TopicFor func(*mensageria.Delivery) string
	// PositionsTopic is the compacted topic that stores, under
	// TransactionalID, the outbox rows of the last Window batches; created
	// compacted with one partition when missing. Default
	// DefaultPositionsTopic.
	PositionsTopic string
	// Window is how many committed batches the position record remembers.
	// It must cover every batch that can be committed and still unsettled
	// in the database: the relay keeps 2 batches in flight, each calling
	// SendBatch once per type. Default 8.
	Window int
	// TransactionTimeout is how long the coordinator lets a transaction
	// stay open before aborting it. Default: franz-go's (40s).
	TransactionTimeout time.Duration
	// Logger receives reconciliations and failures. Default slog.Default().
	Logger *slog.Logger
}

// TransactionalSender delivers each SendBatch as one Kafka transaction and
// records, inside that same transaction, which outbox rows it carried. The
// relay marks the rows delivered in the database only after the commit; if
// the relay dies in between, the rows come back after their lease and this
// sender (or its successor, which reads the position record with
// read_committed when it starts) answers nil for the rows already committed
// instead of producing them again. A read_committed consumer therefore sees
// every outbox message exactly once.
//
// The boundary: it holds while one producer at a time uses the
// transactional id (relay election on, the same id on every replica), while
// the outbox never reuses a row id, and while a committed batch is settled
// before Window newer batches commit. Two relays with different ids over
// the same rows, election off, or a window smaller than the batches that
// can be committed-but-unsettled, each let a batch be produced twice. A
// read_uncommitted consumer also sees aborted records. Beyond Kafka,
// consumers still need an inbox or a Sink.
//
// SendBatch calls run one at a time: a producer has one open transaction.
type TransactionalSender struct {
	cfg      TransactionalConfig
	topicFor func(*mensageria.Delivery) string
	base     []kgo.Opt
	log      *slog.Logger

	mu     sync.Mutex
	cl     *kgo.Client // nil after a failure: reopened on the next call
	pos    *positions
	fenced error
	closed bool

	reconciled atomic.Int64
	committed  atomic.Int64
	aborted    atomic.Int64

	// beforeCommit runs after every record of a transaction was
	// acknowledged and before it commits; tests use it to crash or fence
	// there.
	beforeCommit func()
}

// NewTransactionalSender validates cfg, takes over the transactional id
// (fencing any older producer with it and aborting what it left open) and
// reads the position record back. It needs the cluster.
func NewTransactionalSender(ctx context.Context, cfg TransactionalConfig) (*TransactionalSender, error) {
	topicFor, err := topicFunc(cfg.Topic, cfg.TopicFor)
	if err != nil {
		return nil, err
	}
	switch {
	case len(cfg.Brokers) == 0:
		return nil, &ConfigError{Field: "Brokers", Reason: "required"}
	case cfg.TransactionalID == "":
		return nil, &ConfigError{Field: "TransactionalID", Reason: "required: a stable id per app"}
	case cfg.Window < 0:
		return nil, &ConfigError{Field: "Window", Reason: "must not be negative"}
	}
	if cfg.PositionsTopic == "" {
		cfg.PositionsTopic = DefaultPositionsTopic
	}
	if cfg.Window == 0 {
		cfg.Window = 8
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &TransactionalSender{
		cfg:      cfg,
		topicFor: topicFor,
		base:     append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...)}, cfg.Opts...),
		log:      cfg.Logger.With("transactional_id", cfg.TransactionalID),
	}
	if err := s.open(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *TransactionalSender) open(ctx context.Context) error {
	opts := append(slices.Clone(s.base),
		kgo.TransactionalID(s.cfg.TransactionalID),
		kgo.RequiredAcks(kgo.AllISRAcks()),
	)
	if s.cfg.TransactionTimeout > 0 {
		opts = append(opts, kgo.TransactionTimeout(s.cfg.TransactionTimeout))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return &ConfigError{Field: "Opts", Reason: err.Error()}
	}
	if err := ensureCompactedTopic(ctx, cl, s.cfg.PositionsTopic); err != nil {
		cl.Close()
		return fmt.Errorf("mensageria/kafka: positions topic %q: %w", s.cfg.PositionsTopic, err)
	}
	// Initialising the producer id bumps the epoch: every older producer
	// with this id is fenced and its open transaction aborted before the
	// positions are read, so the read sees a settled log.
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		if isFenced(err) {
			return &FencedError{TransactionalID: s.cfg.TransactionalID, Err: err}
		}
		return fmt.Errorf("mensageria/kafka: init producer id: %w", err)
	}
	val, _, err := readPositions(ctx, s.base, s.cfg.PositionsTopic, s.cfg.TransactionalID)
	if err != nil {
		cl.Close()
		return fmt.Errorf("mensageria/kafka: read positions: %w", err)
	}
	pos, err := decodePositions(s.cfg.Window, val)
	if err != nil {
		cl.Close()
		return &PositionsError{Topic: s.cfg.PositionsTopic, Key: s.cfg.TransactionalID, Err: err}
	}
	s.cl, s.pos = cl, pos
	return nil
}

// Close releases the client. Calls after Close return ErrClosed.
func (s *TransactionalSender) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.cl != nil {
		s.cl.Close()
		s.cl = nil
	}
}

// Reconciled counts deliveries answered from the position record instead
// of being produced again.
func (s *TransactionalSender) Reconciled() int64 { return s.reconciled.Load() }

// Committed and Aborted count transactions.
func (s *TransactionalSender) Committed() int64 { return s.committed.Load() }

// Aborted counts transactions that were aborted.
func (s *TransactionalSender) Aborted() int64 { return s.aborted.Load() }

// Send delivers one message in a transaction of its own.
func (s *TransactionalSender) Send(ctx context.Context, d *mensageria.Delivery) error {
	if errs := s.SendBatch(ctx, []*mensageria.Delivery{d}); errs != nil {
		return errs[0]
	}
	return nil
}

// SendBatch delivers ds in one transaction: all are committed, or none is
// and each gets an error.
func (s *TransactionalSender) SendBatch(ctx context.Context, ds []*mensageria.Delivery) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return fill(len(ds), ErrClosed)
	case s.fenced != nil:
		return fill(len(ds), s.fencedErr(s.fenced))
	}
	if s.cl == nil {
		if err := s.open(ctx); err != nil {
			return fill(len(ds), s.fencedErr(s.failed(err)))
		}
	}
	var todo []int
	for i, d := range ds {
		if !s.pos.has(d.Seq) {
			todo = append(todo, i)
		}
	}
	if n := len(ds) - len(todo); n > 0 {
		s.reconciled.Add(int64(n))
		s.log.Info("outbox rows already committed to Kafka; not producing them again", "rows", n)
	}
	if len(todo) == 0 {
		return nil
	}
	return s.transact(ctx, ds, todo)
}

// fencedRetry is how long the relay waits before retrying a delivery
// refused because this sender was fenced: long enough not to burn attempts
// while the new owner of the id (or an election) sorts it out.
const fencedRetry = time.Minute

func (s *TransactionalSender) fencedErr(err error) error {
	if errors.Is(err, ErrFenced) {
		return mensageria.RetryAfter(err, fencedRetry)
	}
	return err
}

// OnElection ties the transactional id to the relay election when the
// sender is passed to mensageria.Config.Hooks: a process that becomes the
// app's leader re-registers the id on its next batch even if it was fenced
// before (it is the rightful owner now, and fencing the old one is the
// point), while a fenced process that is not the leader stays fenced.
func (s *TransactionalSender) OnElection(ev mensageria.ElectionEvent) {
	if !ev.Leader {
		return
	}
	go func() { // hooks must not block; the lock may be held by a batch
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.fenced != nil && !s.closed {
			s.fenced = nil
			if s.cl != nil {
				s.cl.Close()
				s.cl = nil
			}
		}
	}()
}

func fill(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// failed turns a fencing error into the sender's permanent state.
func (s *TransactionalSender) failed(err error) error {
	if isFenced(err) || errors.Is(err, ErrFenced) {
		if !errors.Is(err, ErrFenced) {
			err = &FencedError{TransactionalID: s.cfg.TransactionalID, Err: err}
		}
		s.fenced = err
		s.log.Error("transactional id taken over by a newer producer; this sender stops", "err", err)
	}
	if s.cl != nil {
		s.cl.Close()
		s.cl = nil
	}
	return err
}

// endTimeout bounds EndTransaction. It runs on a context detached from the
// caller's: cancelling an in-flight EndTxn would leave the outcome unknown.
const endTimeout = 30 * time.Second

func (s *TransactionalSender) transact(ctx context.Context, ds []*mensageria.Delivery, todo []int) []error {
	cl := s.cl
	if err := cl.BeginTransaction(); err != nil {
		return fill(len(ds), s.failed(err))
	}
	seqs := make([]int64, len(todo))
	for k, i := range todo {
		seqs[k] = ds[i].Seq
	}
	next := s.pos.with(seqs)

	var (
		mu      sync.Mutex
		recErrs = make([]error, len(ds))
		first   error
	)
	note := func(i int, err error) {
		mu.Lock()
		defer mu.Unlock()
		if i >= 0 {
			recErrs[i] = err
		}
		if first == nil {
			first = err
		}
	}
	for _, i := range todo {
		cl.Produce(ctx, toRecord(s.topicFor(ds[i]), ds[i]), func(_ *kgo.Record, err error) {
			if err != nil {
				note(i, err)
			}
		})
	}
	cl.Produce(ctx, &kgo.Record{Topic: s.cfg.PositionsTopic, Key: []byte(s.cfg.TransactionalID), Value: next.encode()},
		func(_ *kgo.Record, err error) {
			if err != nil {
				note(-1, fmt.Errorf("position record: %w", err))
			}
		})
	if err := cl.Flush(ctx); err != nil {
		note(-1, err)
	}
	mu.Lock()
	abort := first
	mu.Unlock()

	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer cancel()
	if abort != nil {
		s.aborted.Add(1)
		if err := cl.AbortBufferedRecords(endCtx); err == nil {
			err = cl.EndTransaction(endCtx, kgo.TryAbort)
			if err != nil {
				s.failed(err)
			}
		} else {
			s.failed(err)
		}
		if isFenced(abort) {
			abort = s.fencedErr(s.failed(abort))
		}
		out := make([]error, len(ds))
		for _, i := range todo {
			if recErrs[i] != nil {
				out[i] = classify(recErrs[i])
			} else {
				out[i] = &AbortedError{Cause: abort}
			}
		}
		return out
	}

	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	if err := cl.EndTransaction(endCtx, kgo.TryCommit); err != nil {
		if isFenced(err) || errors.Is(err, kerr.InvalidTxnState) {
			// INVALID_TXN_STATE on a commit means the coordinator ended
			// the transaction as an abort on someone else's behalf: a
			// newer producer took the id (KIP-890 epoch bump). Reopening
			// here would fence that producer in turn.
			s.aborted.Add(1)
			return fill(len(ds), s.fencedErr(s.failed(&FencedError{TransactionalID: s.cfg.TransactionalID, Err: err})))
		}
		// The commit may or may not have happened. Reopening bumps the
		// epoch (ending the transaction either way) and rereads the
		// positions, which tell which it was.
		s.failed(err)
		if oerr := s.open(endCtx); oerr != nil {
			return fill(len(ds), s.failed(fmt.Errorf("commit outcome unknown (%w); reopening: %w", err, oerr)))
		}
		if s.pos.has(seqs[0]) {
			s.committed.Add(1)
			s.log.Warn("commit reported an error but had happened", "err", err)
			return nil
		}
		s.aborted.Add(1)
		return fill(len(ds), &AbortedError{Cause: err})
	}
	s.committed.Add(1)
	s.pos = next
	return nil
}

// AbortedError is returned for a delivery whose transaction was aborted
// because of another record (or the commit) failing; it is retried.
type AbortedError struct{ Cause error }

func (e *AbortedError) Error() string {
	return "mensageria/kafka: transaction aborted: " + e.Cause.Error()
}

func (e *AbortedError) Unwrap() error { return e.Cause }

var _ mensageria.BatchSender = (*TransactionalSender)(nil)
