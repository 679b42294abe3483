package kafka

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
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
	// different between apps: the newly elected relay's producer fences
	// the previous one, which is what makes a crashed or paused relay
	// harmless. Lane i > 0 uses TransactionalID + "." + i. Required.
	//
	// The ids are the app's in the ownership catalog (the sender is a
	// mensageria.ResourceOwner): a second app on the same database
	// configured with one of them fails at Start, naming both apps. Apps
	// on different databases cannot see each other's catalog; there the
	// position record names the outbox it belongs to, and a sender that
	// finds another outbox's record refuses to relay through the id (a
	// *ForeignPositionsError) rather than read its rows against it.
	TransactionalID string
	// Topic receives every message. Required unless TopicFor is set.
	Topic string
	// TopicFor picks the topic per delivery. Default: Topic.
	TopicFor func(*mensageria.Delivery) string
	// PositionsTopic is the compacted topic that stores, under each lane's
	// transactional id, the outbox rows of its last PositionBatches
	// batches; created compacted with one partition when missing. Default
	// DefaultPositionsTopic.
	PositionsTopic string
	// Retain is how long a committed batch is remembered: in memory, so
	// that a batch whose settle was lost is recognised when it comes back
	// after its lease, however many batches commit meanwhile; and in the
	// record, for the batches a lane inherited from a crashed predecessor.
	// It must exceed the relay's Lease with room to spare: Client.Start
	// fails when it does not. Default: ten of the relay's leases and
	// never under five minutes, from the settings Start hands the sender
	// (mensageria.RelayAware); five minutes before that.
	Retain time.Duration
	// PositionBatches is how many of a lane's latest batches its position
	// record holds: what a successor inherits when this relay dies. It
	// must cover the batches that can be committed and still unsettled at
	// that moment (the relay's batches in flight on the lane). Default 8.
	PositionBatches int
	// Lanes is how many transactions may be open at once, each on its own
	// producer and transactional id. A producer has one open transaction at
	// a time, so with one lane the relay's two batches in flight wait for
	// each other. Lanes may grow across restarts but must not shrink while
	// rows a removed lane committed are still unsettled. Default 2.
	Lanes int
	// TransactionTimeout is how long the coordinator lets a transaction
	// stay open before aborting it. Default: franz-go's (40s).
	TransactionTimeout time.Duration
	// Logger receives reconciliations and failures, and the check at
	// Start when the cluster cannot be asked. An outage of the cluster is
	// the relay's to log, once when its route pauses and once when it
	// resumes. Default slog.Default().
	Logger *slog.Logger
}

// TransactionalSender delivers each SendBatch as one Kafka transaction and
// records, inside that same transaction, which outbox rows it carried. The
// relay marks the rows delivered in the database only after the commit; if
// the relay dies in between, the rows come back after their lease and this
// sender (or its successor, which reads the position records with
// read_committed before its first batch) answers nil for the rows already
// committed instead of producing them again. A read_committed consumer therefore sees
// every outbox message exactly once.
//
// The boundary: it holds while one relay at a time uses the transactional
// ids (relay election on, the same TransactionalID on every replica), while
// the outbox never reuses a row id, and while a committed batch that was
// not settled comes back within Retain of its commit. Two relays with
// different ids over the same rows, election off, or a batch coming back
// later than Retain, each let a batch be produced twice. A read_uncommitted consumer also sees aborted records.
// Beyond Kafka, consumers still need an inbox or a Sink.
//
// The position records are one outbox's: row ids of two outboxes overlap,
// so each record names the outbox that wrote it (the id Client.Start hands
// the sender), and a sender never answers its rows from a record of
// another outbox. It refuses that transactional id instead, with a
// *ForeignPositionsError, without registering it. A record of an older
// version names no outbox and is read as this outbox's (that is the
// upgrade); an app on another database still writing such records with
// the same id is not told apart.
type TransactionalSender struct {
	cfg      TransactionalConfig
	topicFor func(*mensageria.Delivery) string
	base     []kgo.Opt
	log      *slog.Logger
	watch    *connWatch  // every client's connections
	admin    *kgo.Client // not transactional: the topic check and diagnosis
	diag     *diagnosis

	// checkTimeout bounds the check at Start, diagnoseAfter is how long a
	// transaction's records are waited for before the cluster is asked
	// what is wrong; tests shorten them.
	checkTimeout, diagnoseAfter time.Duration
	memo                        checkMemo // Check's latest answer, for Start

	free chan *lane // lanes not running a transaction

	openMu sync.Mutex  // serialises openAll
	opened atomic.Bool // every lane is registered
	leader atomic.Bool // the last election event said this process leads

	retainSet bool // cfg.Retain was given, not defaulted

	// rearmWait is the first pause between attempts to register the ids
	// after an election, rearmTimeout bounds one attempt, healAfter is how
	// long a fenced leader waits before taking its ids back; tests shorten
	// them.
	rearmWait, rearmTimeout, healAfter time.Duration

	mu       sync.Mutex    // guards the fields below and every lane's pos
	self     owner         // the outbox and app relaying, from UseRelaySettings
	retain   time.Duration // cfg.Retain, or the default from the settings
	lanes    []*lane
	inflight []*reservation // the rows of the transactions in progress
	fenced   error
	fencedAt time.Time
	closed   bool
	rearming bool

	reconciled atomic.Int64
	committed  atomic.Int64
	aborted    atomic.Int64

	// beforeCommit runs after every record of a transaction was
	// acknowledged and before it commits; tests use it to crash or fence
	// there.
	beforeCommit func()
}

// lane is one transactional producer. Only the holder of the lane (taken
// from free) touches cl.
type lane struct {
	id  string
	cl  *kgo.Client // nil after a failure: reopened on the next batch
	pos *positions  // guarded by TransactionalSender.mu
}

// NewTransactionalSender validates cfg. It does not contact the cluster:
// registering the transactional ids fences every other producer with them,
// so that happens only in the process that relays, when it first sends,
// when it wins the relay election (OnElection), or when Open is called.
// Every replica of an app can therefore build its sender at start without
// fencing the one that is relaying.
func NewTransactionalSender(cfg TransactionalConfig) (*TransactionalSender, error) {
	topicFor, err := topicFunc(cfg.Topic, cfg.TopicFor)
	if err != nil {
		return nil, err
	}
	switch {
	case len(cfg.Brokers) == 0:
		return nil, &ConfigError{Field: "Brokers", Reason: "required"}
	case cfg.TransactionalID == "":
		return nil, &ConfigError{Field: "TransactionalID", Reason: "required: a stable id per app"}
	case cfg.PositionBatches < 0:
		return nil, &ConfigError{Field: "PositionBatches", Reason: "must not be negative"}
	case cfg.Retain < 0:
		return nil, &ConfigError{Field: "Retain", Reason: "must not be negative"}
	case cfg.Lanes < 0 || cfg.Lanes > 16:
		return nil, &ConfigError{Field: "Lanes", Reason: "must be 1..16"}
	}
	retainSet := cfg.Retain != 0
	if cfg.PositionsTopic == "" {
		cfg.PositionsTopic = DefaultPositionsTopic
	}
	if cfg.PositionBatches == 0 {
		cfg.PositionBatches = 8
	}
	if cfg.Retain == 0 {
		cfg.Retain = defaultRetain(mensageria.DefaultLease)
	}
	if cfg.Lanes == 0 {
		cfg.Lanes = 2
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	watch := &connWatch{}
	s := &TransactionalSender{
		cfg:      cfg,
		topicFor: topicFor,
		base:     append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.WithHooks(watch)}, cfg.Opts...),
		log:      cfg.Logger.With("transactional_id", cfg.TransactionalID),
		watch:    watch,
		free:     make(chan *lane, cfg.Lanes),

		checkTimeout:  startCheckTimeout,
		diagnoseAfter: diagnoseAfter,

		retainSet: retainSet,
		retain:    cfg.Retain,
	}
	// Options are checked now; a client that is never used does not dial.
	cl, err := kgo.NewClient(append(slices.Clone(s.base), kgo.TransactionalID(cfg.TransactionalID))...)
	if err != nil {
		return nil, &ConfigError{Field: "Opts", Reason: err.Error()}
	}
	cl.Close()
	// A client that is never used does not dial either.
	if s.admin, err = kgo.NewClient(s.base...); err != nil {
		return nil, &ConfigError{Field: "Opts", Reason: err.Error()}
	}
	s.diag = newDiagnosis(s.admin, watch)
	for i := range cfg.Lanes {
		l := &lane{id: cfg.TransactionalID}
		if i > 0 {
			l.id += "." + strconv.Itoa(i)
		}
		s.lanes = append(s.lanes, l)
		s.free <- l
	}
	return s, nil
}

// open (re)registers a lane's transactional id and reads its position
// record.
func (s *TransactionalSender) open(ctx context.Context, l *lane) error {
	opts := append(slices.Clone(s.base),
		kgo.TransactionalID(l.id),
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
	s.mu.Lock()
	self, retain := s.self, s.retain
	s.mu.Unlock()
	// Whose the record is, first: registering the id would fence the
	// producer that uses it, and when that is another outbox's relay,
	// this one is the misconfigured party and must leave it alone. Read
	// up to the last stable offset, this misses only a record in a
	// transaction still open, which the read after registering sees.
	if val, _, err := readPositions(ctx, s.base, s.cfg.PositionsTopic, l.id); err != nil {
		cl.Close()
		return fmt.Errorf("mensageria/kafka: read positions: %w", err)
	} else if rec, err := recordOwner(val); err != nil {
		cl.Close()
		return &PositionsError{Topic: s.cfg.PositionsTopic, Key: l.id, Err: err}
	} else if err := s.foreign(l, rec, self); err != nil {
		cl.Close()
		return err
	}
	// Initialising the producer id bumps the epoch: every older producer
	// with this id is fenced and its open transaction aborted before the
	// positions are read, so the read sees a settled log.
	if _, _, err := cl.ProducerID(ctx); err != nil {
		cl.Close()
		if isFenced(err) {
			return &FencedError{TransactionalID: l.id, Err: err}
		}
		return fmt.Errorf("mensageria/kafka: init producer id %q: %w", l.id, err)
	}
	val, _, err := readPositions(ctx, s.base, s.cfg.PositionsTopic, l.id)
	if err != nil {
		cl.Close()
		return fmt.Errorf("mensageria/kafka: read positions: %w", err)
	}
	pos, err := decodePositions(s.cfg.PositionBatches, retain, val)
	if err != nil {
		cl.Close()
		return &PositionsError{Topic: s.cfg.PositionsTopic, Key: l.id, Err: err}
	}
	if err := s.foreign(l, pos.read, self); err != nil {
		cl.Close()
		return err
	}
	if len(val) > 0 && pos.read.Outbox == uuid.Nil && self.Outbox != uuid.Nil {
		s.log.Info("the position record names no outbox (an older version); read as this outbox's, and rewritten with it by the next transaction", "lane", l.id)
	}
	pos.writer = self
	s.mu.Lock()
	pos.inherit(l.pos)
	l.pos = pos
	s.mu.Unlock()
	l.cl = cl
	return nil
}

// foreign refuses a lane whose record belongs to another outbox than self.
// A record naming no outbox (an older version) is this outbox's.
func (s *TransactionalSender) foreign(l *lane, rec, self owner) error {
	if rec.Outbox == uuid.Nil || rec.Outbox == self.Outbox {
		return nil
	}
	err := &ForeignPositionsError{TransactionalID: l.id, Topic: s.cfg.PositionsTopic,
		Outbox: self.Outbox, App: self.App, RecordOutbox: rec.Outbox, RecordApp: rec.App}
	s.log.Error("transactional id used by another outbox; refusing to relay through it (nothing produced, no row settled)",
		"lane", l.id, "outbox", self.Outbox, "app", self.App, "record_outbox", rec.Outbox, "record_app", rec.App, "err", err)
	return err
}

// defaultRetain is Retain when the config gives none: a batch whose
// settle was lost comes back after its lease, so ten leases, and never
// under five minutes.
func defaultRetain(lease time.Duration) time.Duration {
	return max(5*time.Minute, 10*lease)
}

// UseRelaySettings implements mensageria.RelayAware; Client.Start calls
// it before the first claim. The outbox id goes into every position
// record the sender writes, and records of another outbox are refused
// from then on; Retain, when the config gave none, becomes ten of the
// relay's leases and never under five minutes. It fails when an explicit
// Retain does not exceed the lease, when the sender already serves
// another outbox (one sender per Client), and, as Sender.UseRelaySettings
// does, when the topic is missing or refused (a *TopicError naming it).
// The check registers no transactional id.
func (s *TransactionalSender) UseRelaySettings(rs mensageria.RelaySettings) error {
	if err := s.useSettings(rs); err != nil {
		return err
	}
	if s.cfg.TopicFor != nil {
		s.log.Info("the Kafka topics are not checked at start: the topic is picked per delivery", "destination", s.Destination())
		return nil
	}
	// The check registers nothing: a standby replica runs it too.
	return checkAtStart(s.cfg.Logger, s.Destination(), s.checkTimeout, &s.memo, s.check)
}

func (s *TransactionalSender) useSettings(rs mensageria.RelaySettings) error {
	lease := cmp.Or(rs.Lease, mensageria.DefaultLease)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.self.Outbox != uuid.Nil && rs.OutboxID != s.self.Outbox {
		return &ConfigError{Field: "TransactionalSender", Reason: fmt.Sprintf("already relays outbox %s (app %q); one sender serves one outbox, so give app %q a sender of its own, with its own transactional id", s.self.Outbox, s.self.App, rs.App)}
	}
	retain := s.retain
	if !s.retainSet {
		retain = defaultRetain(lease)
	} else if retain <= lease {
		return &ConfigError{Field: "Retain", Reason: fmt.Sprintf("%s does not exceed the relay's lease of %s: a batch whose settle was lost comes back after its lease, and would be produced again once forgotten", retain, lease)}
	}
	s.retain = retain
	if rs.OutboxID != uuid.Nil {
		s.self = owner{Outbox: rs.OutboxID, App: rs.App}
	}
	for _, l := range s.lanes {
		// A lane opened before now read a record naming no outbox (any
		// other was refused): it is this one's, and so are its rewrites.
		if l.pos != nil {
			l.pos.writer, l.pos.retain = s.self, retain
		}
	}
	return nil
}

// Check asks the cluster whether Topic exists and may be used, creating
// nothing (unless Opts let the client create topics): a *TopicError naming
// the topic and the Kafka error (UNKNOWN_TOPIC_OR_PARTITION for a missing
// topic, TOPIC_AUTHORIZATION_FAILED, a partition without a leader), an
// *UnreachableError or the client's error when the cluster did not answer
// within ctx, nil otherwise. It registers no transactional id, so it is
// safe in a standby replica. With TopicFor: nil.
func (s *TransactionalSender) Check(ctx context.Context) error {
	return s.memo.remember(s.check(ctx))
}

func (s *TransactionalSender) check(ctx context.Context) error {
	if s.cfg.TopicFor != nil {
		return nil
	}
	answer, err := describeTopic(ctx, s.admin, s.cfg.Topic, s.diag.create)
	if err != nil {
		if u := s.watch.unreachable(); u != nil {
			return u
		}
		return fmt.Errorf("mensageria/kafka: asking the cluster about topic %q: %w", s.cfg.Topic, err)
	}
	return answer
}

// OwnedResources implements mensageria.ResourceOwner: every lane's
// transactional id, which Client.Start records as the app's in the
// ownership catalog.
func (s *TransactionalSender) OwnedResources() []driver.Resource {
	out := make([]driver.Resource, len(s.lanes))
	for i, l := range s.lanes {
		out[i] = driver.Resource{Kind: driver.ResourceKafkaTransactionalID, Name: l.id}
	}
	return out
}

// Close releases the clients, waiting for transactions in progress. Calls
// after Close return ErrClosed.
func (s *TransactionalSender) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	n := len(s.lanes)
	s.mu.Unlock()
	defer s.admin.Close()
	for range n {
		l := <-s.free
		if l.cl != nil {
			l.cl.Close()
			l.cl = nil
		}
	}
}

// Destination implements mensageria.DestinationNamer: "kafka topic t".
func (s *TransactionalSender) Destination() string {
	return destination(s.cfg.Topic, s.cfg.TopicFor)
}

// TransactionalID is the configured id (lane 0's; lane i uses it + "." + i).
func (s *TransactionalSender) TransactionalID() string { return s.cfg.TransactionalID }

// Reconciled counts deliveries answered from the position records instead
// of being produced again.
func (s *TransactionalSender) Reconciled() int64 { return s.reconciled.Load() }

// Committed counts committed transactions.
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

// fencedRetry is how long the relay waits before retrying a delivery
// refused because this sender was fenced: long enough not to burn attempts
// while the new owner of the id (or an election) sorts it out.
const fencedRetry = time.Minute

// laneErr is the answer for deliveries whose lane could not be opened or
// used: a fenced sender or a foreign record asks the relay to wait; a
// sender closed, a config or a position record that cannot be read stays
// as it is; anything else is the cluster's failure (the coordinator
// unreachable, the positions topic unreadable, no authorization for the
// id), about the route rather than the messages.
func laneErr(err error) error {
	var (
		ce *ConfigError
		pe *PositionsError
	)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrFenced), errors.Is(err, ErrForeignPositions):
		return mensageria.RetryAfter(err, fencedRetry)
	case errors.Is(err, ErrClosed), errors.As(err, &ce), errors.As(err, &pe),
		mensageria.IsUnavailable(err), mensageria.IsPermanent(err),
		errors.Is(err, context.Canceled):
		return err
	}
	return mensageria.Unavailable(err)
}

// OnElection ties the transactional ids to the relay election (the Client
// calls it for a sender in its Registry; it need not be passed in
// Config.Hooks too): a process that wins the
// election registers every lane's id again (it is the rightful owner now,
// and another process may have used the ids since it last did: fencing
// that one is the point) and rereads the positions, ahead of its next
// batch. A fenced process that is not the leader stays fenced.
func (s *TransactionalSender) OnElection(ev mensageria.ElectionEvent) {
	s.leader.Store(ev.Leader)
	if !ev.Leader {
		return
	}
	s.mu.Lock()
	start := !s.rearming && !s.closed
	if start {
		s.rearming = true
	}
	s.mu.Unlock()
	if start {
		go s.rearm() // hooks must not block
	}
}

// Open registers every lane's transactional id now, fencing any other
// producer with it and aborting what that one left open, and reads the
// position records back. The sender does this by itself on first use and
// when its process wins the relay election; call Open only in a process
// that is about to relay (to fail at start when the cluster is
// unreachable), never in a standby replica: it would fence the relaying
// one.
func (s *TransactionalSender) Open(ctx context.Context) error {
	s.openMu.Lock()
	defer s.openMu.Unlock()
	return s.openAll(ctx)
}

// ensureOpen opens every lane before the first batch. All of them, not
// just the one a batch takes: a predecessor may have committed rows on any
// lane, and the positions of all must be known before any row is produced.
func (s *TransactionalSender) ensureOpen(ctx context.Context) error {
	if s.opened.Load() {
		return nil
	}
	s.openMu.Lock()
	defer s.openMu.Unlock()
	s.mu.Lock()
	fenced := s.fenced != nil
	s.mu.Unlock()
	if s.opened.Load() || fenced {
		return nil // a fenced sender registers again only when elected
	}
	return s.openAll(ctx)
}

// openAll takes every lane (waiting for batches in progress), reopens them
// all and lifts a fenced state. The caller holds openMu.
func (s *TransactionalSender) openAll(ctx context.Context) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	held := make([]*lane, 0, len(s.lanes))
	defer func() {
		for _, l := range held {
			s.free <- l
		}
	}()
	for range s.lanes {
		select {
		case l := <-s.free:
			held = append(held, l)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Until every lane is open again, no batch may be produced: a lane
	// left closed would be reopened alone, next to lanes whose positions
	// may be stale.
	s.opened.Store(false)
	for _, l := range held {
		drop(l)
		if err := s.open(ctx, l); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.fenced = nil
	s.mu.Unlock()
	s.opened.Store(true)
	return nil
}

// rearm reopens every lane after this process won the election, retrying
// for a while: all of them, since a lane left to the previous owner would
// let two relays commit the same rows.
func (s *TransactionalSender) rearm() {
	defer func() {
		s.mu.Lock()
		s.rearming = false
		s.mu.Unlock()
	}()
	wait := cmp.Or(s.rearmWait, time.Second)
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(s.rearmTimeout, endTimeout))
		s.openMu.Lock()
		err = s.openAll(ctx)
		s.openMu.Unlock()
		cancel()
		if err == nil {
			s.log.Info("relay elected: transactional ids registered")
			return
		}
		if errors.Is(err, ErrClosed) {
			return
		}
		if errors.Is(err, ErrForeignPositions) {
			return // logged; waiting will not change whose the record is
		}
		if mensageria.IsUnavailable(laneErr(err)) {
			// The cluster's failure: the batches meet it too, and the
			// relay's route breaker logs the outage once.
			s.log.Debug("registering the transactional ids failed: the cluster does not answer", "attempt", attempt, "err", err)
		} else {
			s.log.Warn("registering the transactional ids failed", "attempt", attempt, "err", err)
		}
		time.Sleep(wait)
		wait *= 2
	}
	if !mensageria.IsUnavailable(laneErr(err)) {
		s.log.Error("registering the transactional ids failed; the next batch tries again", "err", err)
	}
}

// errRegistering answers a batch that came while the ids are not all
// registered; the relay retries it.
var errRegistering = errors.New("mensageria/kafka: the transactional ids are not registered yet")

// healIfLeader takes the ids back when a leader has stayed fenced for
// healAfter (default a minute). A zombie fenced by the new leader learns
// within a third of the relay's lease that it lost, and stops being the
// leader before then; a leader still fenced after that was fenced by a
// zombie that had re-registered, and would otherwise stay fenced until the
// next election.
func (s *TransactionalSender) healIfLeader() {
	if !s.leader.Load() {
		return
	}
	s.mu.Lock()
	start := s.fenced != nil && time.Since(s.fencedAt) > cmp.Or(s.healAfter, fencedRetry) && !s.rearming && !s.closed
	if start {
		s.rearming = true
	}
	s.mu.Unlock()
	if start {
		s.log.Warn("still the elected relay but fenced; registering the transactional ids again")
		go s.rearm()
	}
}

func fill(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// SendBatch delivers ds in one transaction: all are committed, or none is
// and each gets an error. Rows a lane already committed are answered nil
// without producing them.
func (s *TransactionalSender) SendBatch(ctx context.Context, ds []*mensageria.Delivery) []error {
	errs, _ := s.sendBatch(ctx, ds)
	return errs
}

// sendBatch is SendBatch; answered is false when the cluster had no say
// in the outcome (the rows were known committed, the sender is fenced).
func (s *TransactionalSender) sendBatch(ctx context.Context, ds []*mensageria.Delivery) (_ []error, answered bool) {
	for _, d := range ds {
		if d.Seq < 1 {
			// The row id is what the position records remember; without
			// it two messages would pass for one and the second be
			// skipped as already committed.
			return fill(len(ds), mensageria.Permanent(ErrNoRowID)), false
		}
	}
	if err := s.ensureOpen(ctx); err != nil {
		return fill(len(ds), laneErr(err)), true
	}
	var l *lane
	select {
	case l = <-s.free:
	case <-ctx.Done():
		return fill(len(ds), ctx.Err()), false
	}
	defer func() { s.free <- l }()

	res, errAll := s.reserve(ctx, ds)
	if errAll != nil {
		if errors.Is(errAll, ErrFenced) {
			s.healIfLeader()
		}
		return fill(len(ds), errAll), false
	}
	defer s.release(res)
	if len(res.todo) == 0 {
		return nil, false
	}
	if l.cl == nil {
		if !s.opened.Load() {
			// Registering every lane failed part way: this one alone must
			// not be reopened next to lanes whose positions may be stale.
			return s.failAll(ds, res.todo, mensageria.Unavailable(errRegistering)), true
		}
		if err := s.open(ctx, l); err != nil {
			return s.failAll(ds, res.todo, s.failed(l, err)), true
		}
		// The reopened record may show rows committed by a predecessor.
		s.mu.Lock()
		if l.pos.overlaps(res.rows) {
			n := len(res.todo)
			res.todo = slices.DeleteFunc(res.todo, func(i int) bool { return l.pos.has(ds[i].Seq) })
			s.reconciled.Add(int64(n - len(res.todo)))
			res.rows = rowsOf(ds, res.todo)
		}
		s.mu.Unlock()
		if len(res.todo) == 0 {
			return nil, true
		}
	}
	return s.transact(ctx, l, ds, res), true
}

// reservation is one SendBatch's claim on its rows while it runs: the
// indexes into ds still to produce, and their row ids.
type reservation struct {
	todo []int
	rows rowSet
	done chan struct{} // closed when the batch ends
}

func rowsOf(ds []*mensageria.Delivery, idx []int) rowSet {
	ids := make([]int64, len(idx))
	for k, i := range idx {
		ids[k] = ds[i].Seq
	}
	return newRowSet(ids)
}

// reserve splits ds into the rows some lane already committed and the rows
// to produce, and marks the latter in flight. A row in flight on another
// lane (its lease ran out and the relay claimed it again) is waited for
// first: producing it in parallel could commit it twice.
func (s *TransactionalSender) reserve(ctx context.Context, ds []*mensageria.Delivery) (*reservation, error) {
	all := make([]int, len(ds))
	for i := range all {
		all[i] = i
	}
	res := &reservation{todo: all, rows: rowsOf(ds, all), done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		switch {
		case s.closed:
			return nil, ErrClosed
		case s.fenced != nil:
			return nil, laneErr(s.fenced)
		}
		var busy chan struct{}
		for _, other := range s.inflight {
			if other.rows.overlaps(res.rows) {
				busy = other.done
				break
			}
		}
		if busy == nil {
			break
		}
		s.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			s.mu.Lock()
			return nil, ctx.Err()
		}
		s.mu.Lock()
	}
	if s.committedLocked(res.rows) {
		res.todo = slices.DeleteFunc(res.todo, func(i int) bool {
			for _, l := range s.lanes {
				if l.pos != nil && l.pos.has(ds[i].Seq) {
					return true
				}
			}
			return false
		})
		done := len(ds) - len(res.todo)
		res.rows = rowsOf(ds, res.todo)
		s.reconciled.Add(int64(done))
		s.log.Info("outbox rows already committed to Kafka; not producing them again", "rows", done)
	}
	s.inflight = append(s.inflight, res)
	return res, nil
}

// committedLocked reports whether a lane committed any of rows.
func (s *TransactionalSender) committedLocked(rows rowSet) bool {
	for _, l := range s.lanes {
		if l.pos != nil && l.pos.overlaps(rows) {
			return true
		}
	}
	return false
}

func (s *TransactionalSender) release(res *reservation) {
	s.mu.Lock()
	s.inflight = slices.DeleteFunc(s.inflight, func(r *reservation) bool { return r == res })
	s.mu.Unlock()
	close(res.done)
}

func (s *TransactionalSender) failAll(ds []*mensageria.Delivery, todo []int, err error) []error {
	out := make([]error, len(ds))
	for _, i := range todo {
		out[i] = err
	}
	return out
}

// failed drops a lane's client after an error; a fencing error becomes the
// sender's state: another relay owns the ids now.
func (s *TransactionalSender) failed(l *lane, err error) error {
	if isFenced(err) || errors.Is(err, ErrFenced) {
		if !errors.Is(err, ErrFenced) {
			err = &FencedError{TransactionalID: l.id, Err: err}
		}
		s.mu.Lock()
		if s.fenced == nil {
			s.fencedAt = time.Now()
		}
		s.fenced = err
		s.mu.Unlock()
		s.log.Error("transactional id taken over by a newer producer; this sender stops", "lane", l.id, "err", err)
	}
	drop(l)
	return laneErr(err)
}

// drop lets go of a lane's client; the lane reopens with a new one on its
// next batch. Closing waits for the client's requests in flight, which
// against a cluster that does not answer outlasts the batch's deadline,
// so it runs apart. The old client can no longer commit: the transaction
// it may have open is aborted by the coordinator, at the latest when the
// new client registers the id and bumps its epoch.
func drop(l *lane) {
	if cl := l.cl; cl != nil {
		l.cl = nil
		go cl.Close()
	}
}

// endTimeout bounds ending a transaction for a caller without a deadline.
// Ending runs on a context detached from the caller's: cancelling an
// in-flight EndTxn would leave the outcome unknown.
const endTimeout = 30 * time.Second

// endFloor is the least time given to end a transaction, even past the
// caller's deadline: one round trip to the coordinator.
const endFloor = 250 * time.Millisecond

// endContext bounds ending a transaction by the caller's deadline (the
// relay's is its lease less a margin for the settle, half a second for a
// lease of two seconds or more, so that ending endFloor past the deadline
// still leaves the settle time within the lease), by endFloor at the
// least, or by endTimeout when there is none.
func endContext(ctx context.Context) (context.Context, context.CancelFunc) {
	detached := context.WithoutCancel(ctx)
	if dl, ok := ctx.Deadline(); ok {
		if floor := time.Now().Add(endFloor); dl.Before(floor) {
			dl = floor
		}
		return context.WithDeadline(detached, dl)
	}
	return context.WithTimeout(detached, endTimeout)
}

// transact sends a reserved batch in one Kafka transaction of lane l: its
// records and the lane's position record, then a commit, or an abort when
// any of them failed.
func (s *TransactionalSender) transact(ctx context.Context, l *lane, ds []*mensageria.Delivery, res *reservation) []error {
	todo := res.todo
	// The transaction is this client's even if the lane drops it meanwhile.
	cl := l.cl
	if err := cl.BeginTransaction(); err != nil {
		return s.failAll(ds, todo, s.failed(l, err))
	}
	s.mu.Lock()
	value := l.pos.encodeWith(res.rows)
	s.mu.Unlock()
	p := s.produceAll(ctx, l, cl, ds, todo, value)

	endCtx, cancel := endContext(ctx)
	defer cancel()
	if p.first != nil {
		return s.abortTransaction(ctx, endCtx, l, cl, ds, todo, p)
	}
	return s.commitTransaction(ctx, endCtx, l, cl, ds, res)
}

// produced is what producing a transaction's records came to: the first
// failure, which makes it abort, and each record's own failure with its
// partition.
type produced struct {
	first   error
	recErrs []error
	parts   []int32
}

// produceAll produces the records of ds[todo] and the position record
// value, and waits for their answers. A record still unanswered when the
// wait ends (the deadline passed) is answered later, when its client is
// closed or aborts: that answer is not the batch's any more and is
// dropped, so the result returned is not written to while it is read.
func (s *TransactionalSender) produceAll(ctx context.Context, l *lane, cl *kgo.Client, ds []*mensageria.Delivery, todo []int, value []byte) produced {
	var (
		mu     sync.Mutex
		closed bool
	)
	p := produced{recErrs: make([]error, len(ds)), parts: make([]int32, len(ds))}
	note := func(i int, part int32, err error) {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			return
		}
		if i >= 0 {
			p.recErrs[i], p.parts[i] = err, part
		}
		if p.first == nil {
			p.first = err
		}
	}
	for _, i := range todo {
		cl.Produce(ctx, toRecord(s.topicFor(ds[i]), ds[i]), func(r *kgo.Record, err error) {
			if err != nil {
				note(i, r.Partition, err)
			}
		})
	}
	cl.Produce(ctx, &kgo.Record{Topic: s.cfg.PositionsTopic, Key: []byte(l.id), Value: value},
		func(_ *kgo.Record, err error) {
			if err != nil {
				note(-1, -1, fmt.Errorf("position record: %w", err))
			}
		})
	if err := s.flush(ctx, cl, ds, todo); err != nil {
		note(-1, -1, err)
	}
	mu.Lock()
	defer mu.Unlock()
	closed = true
	return p
}

// abortTransaction ends a transaction whose records did not all make it
// and tells each delivery why: its record's own refusal, or its
// neighbour's.
func (s *TransactionalSender) abortTransaction(ctx, endCtx context.Context, l *lane, cl *kgo.Client, ds []*mensageria.Delivery, todo []int, p produced) []error {
	abort := p.first
	s.aborted.Add(1)
	if ne := (*NoAckError)(nil); errors.As(abort, &ne) && ctx.Err() != nil {
		// The cluster did not answer by the deadline: aborting
		// would wait for it again, past the lease. Dropping the
		// client ends the transaction just as surely.
		s.failed(l, abort)
	} else if err := cl.AbortBufferedRecords(endCtx); err != nil {
		s.failed(l, err)
	} else if err := cl.EndTransaction(endCtx, kgo.TryAbort); err != nil {
		s.failed(l, err)
	}
	if isFenced(abort) {
		return s.failAll(ds, todo, s.failed(l, abort))
	}
	// The others were refused because of a record that failed, or of
	// the destination: a failure of the destination is theirs too.
	others := error(&AbortedError{Cause: abort})
	if c := classify(s.topicFor(ds[todo[0]]), -1, abort); mensageria.IsUnavailable(c) {
		others = mensageria.Unavailable(&AbortedError{Cause: c})
	}
	out := make([]error, len(ds))
	for _, i := range todo {
		if refusedItself(p.recErrs[i]) {
			out[i] = classify(s.topicFor(ds[i]), p.parts[i], p.recErrs[i])
		} else {
			out[i] = others
		}
	}
	return out
}

// commitTransaction commits a transaction whose records all made it. When
// the commit's outcome is unknown, reopening the lane rereads the
// position record, which tells.
func (s *TransactionalSender) commitTransaction(ctx, endCtx context.Context, l *lane, cl *kgo.Client, ds []*mensageria.Delivery, res *reservation) []error {
	todo := res.todo
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	if err := cl.EndTransaction(endCtx, kgo.TryCommit); err != nil {
		s.aborted.Add(1)
		if isFenced(err) || errors.Is(err, kerr.InvalidTxnState) {
			// INVALID_TXN_STATE on a commit means the coordinator ended
			// the transaction as an abort on someone else's behalf: a
			// newer producer took the id (KIP-890 epoch bump). Reopening
			// here would fence that producer in turn.
			return s.failAll(ds, todo, s.failed(l, &FencedError{TransactionalID: l.id, Err: err}))
		}
		// The commit may or may not have happened. Reopening bumps the
		// epoch (ending the transaction either way) and rereads the
		// position record, which tells which it was.
		s.failed(l, err)
		reopenCtx, cancel := endContext(ctx)
		defer cancel()
		if oerr := s.open(reopenCtx, l); oerr != nil {
			// Until some lane rereads the record, no lane may produce
			// these rows: every lane is reopened before the next batch.
			s.opened.Store(false)
			return s.failAll(ds, todo, s.failed(l, fmt.Errorf("commit outcome unknown (%w); reopening: %w", err, oerr)))
		}
		s.mu.Lock()
		happened := l.pos.has(ds[todo[0]].Seq)
		s.mu.Unlock()
		if happened {
			s.aborted.Add(-1)
			s.committed.Add(1)
			s.log.Warn("commit reported an error but had happened", "lane", l.id, "err", err)
			return nil
		}
		return s.failAll(ds, todo, laneErr(&AbortedError{Cause: err}))
	}
	s.committed.Add(1)
	s.mu.Lock()
	l.pos.add(res.rows)
	s.mu.Unlock()
	return nil
}

// refusedItself reports a record's own failure, as opposed to none, or to
// the client dropping it because the transaction was given up (aborted,
// or a context ended).
func refusedItself(err error) bool {
	return err != nil && !errors.Is(err, kgo.ErrAborting) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)
}

// flush sends the transaction's records and waits for their answers, or
// for ctx to end. After diagnoseAfter (or half the time left) it asks the
// cluster about the topic and gives up at once when the topic is missing
// or refused; at ctx's end it returns a *NoAckError with the cause found.
func (s *TransactionalSender) flush(ctx context.Context, cl *kgo.Client, ds []*mensageria.Delivery, todo []int) error {
	start := time.Now()
	flushCtx, stop := context.WithCancel(ctx)
	defer stop()
	flushed := make(chan error, 1)
	go func() { flushed <- cl.Flush(flushCtx) }()
	wait := s.diagnoseAfter
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	topic := s.topicFor(ds[todo[0]])
	var (
		cause   error
		checked bool
	)
	select {
	case err := <-flushed:
		return err
	case <-ctx.Done():
	case <-t.C:
		cause, checked = s.diag.topic(ctx, topic), true
		if TopicRefused(cause) {
			stop()
			<-flushed
			return cause
		}
		select {
		case err := <-flushed:
			return err
		case <-ctx.Done():
		}
	}
	<-flushed
	if u := s.watch.unreachable(); u != nil {
		cause = u
	}
	return &NoAckError{Topic: topic, Waited: time.Since(start), Cause: cause, Checked: checked, ctxErr: ctx.Err()}
}

// AbortedError is returned for a delivery whose transaction was aborted
// because of another record (or the commit) failing; it is retried.
type AbortedError struct{ Cause error }

func (e *AbortedError) Error() string {
	return "mensageria/kafka: transaction aborted: " + e.Cause.Error()
}

func (e *AbortedError) Unwrap() error { return e.Cause }

var (
	_ mensageria.BatchSender      = (*TransactionalSender)(nil)
	_ mensageria.RelayAware       = (*TransactionalSender)(nil)
	_ mensageria.ResourceOwner    = (*TransactionalSender)(nil)
	_ mensageria.DestinationNamer = (*TransactionalSender)(nil)
	_ mensageria.OnElection       = (*TransactionalSender)(nil)
)
