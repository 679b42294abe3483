package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/m2mwire"
)

// Record header names set by the Senders. The message id is the identity a
// receiver dedupes on when the natural key is not enough.
const (
	HeaderMessageID = "mensageria-id"
	HeaderType      = "mensageria-type"
	// HeaderCreatedAt carries the enqueue time (RFC 3339, UTC), which a
	// receiving Inbox needs for its dedup window.
	HeaderCreatedAt = "mensageria-created-at"
)

// SenderConfig configures a Sender.
type SenderConfig struct {
	// Client produces the records. It must keep idempotent writes on (the
	// franz-go default). When nil, a client is built from Brokers and Opts
	// and closed by Close.
	Client *kgo.Client
	// Brokers are the seed brokers, used when Client is nil.
	Brokers []string
	// Opts are extra client options, used when Client is nil.
	Opts []kgo.Opt
	// Producers is how many clients the Sender builds from Brokers and
	// Opts, each batch producing on one of them alone. An idempotent
	// client keeps one produce request in flight per broker, so the
	// relay's batches in flight on one client wait for each other's
	// round trips. Batches in flight never share an ordered key (the
	// relay claims a key's next message only once the one before is
	// settled), so order per key holds. Default 2, as the relay's
	// batches in flight; with Client, that one client is shared.
	Producers int
	// Topic receives every message. Required unless TopicFor is set.
	Topic string
	// TopicFor picks the topic per delivery, for one Sender shared by
	// several routes. Default: Topic.
	TopicFor func(*mensageria.Delivery) string
	// Logger receives the check at Start when the cluster cannot be
	// asked. An outage of the topic is the relay's to log, once when its
	// route pauses and once when it resumes. Default slog.Default().
	Logger *slog.Logger
}

// Sender delivers messages to Kafka on the idempotent producer: the record
// key is the natural key, so one key stays in one partition and in order;
// the message id and type travel in headers; the payload is the value.
type Sender struct {
	cl       *kgo.Client      // the first producer: Client, checks, diagnosis
	free     chan *kgo.Client // producers not running a batch; nil: cl is shared
	all      []*kgo.Client
	own      bool
	topic    string // cfg.Topic, when every delivery goes there
	topicFor func(*mensageria.Delivery) string
	dest     string
	log      *slog.Logger
	diag     *diagnosis

	// checkTimeout bounds the check at Start, diagnoseAfter is how long a
	// batch waits before the cluster is asked what is wrong; tests
	// shorten them.
	checkTimeout, diagnoseAfter time.Duration
	memo                        checkMemo // Check's latest answer, for Start

	closeOnce sync.Once
}

// NewSender validates cfg and returns a Sender. It does not contact the
// cluster: Client.Start checks the topic (UseRelaySettings), and Check
// does on demand.
func NewSender(cfg SenderConfig) (*Sender, error) {
	topicFor, err := topicFunc(cfg.Topic, cfg.TopicFor)
	if err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Sender{topicFor: topicFor, dest: destination(cfg.Topic, cfg.TopicFor), log: cfg.Logger,
		checkTimeout: startCheckTimeout, diagnoseAfter: diagnoseAfter}
	if cfg.TopicFor == nil {
		s.topic = cfg.Topic
	}
	if cfg.Client != nil {
		// The redelivery-free retry inside a producer session is the one
		// guarantee this Sender promises; a client without it cannot keep
		// it, so refuse it instead of silently duplicating on retries.
		if v, _ := cfg.Client.OptValue(kgo.DisableIdempotentWrite).(bool); v {
			return nil, &ConfigError{Field: "Client", Reason: "idempotent writes are disabled (kgo.DisableIdempotentWrite); the Sender needs them"}
		}
		s.cl = cfg.Client
		s.diag = newDiagnosis(s.cl, nil)
		return s, nil
	}
	if len(cfg.Brokers) == 0 {
		return nil, &ConfigError{Field: "Brokers", Reason: "set Client or Brokers"}
	}
	switch {
	case cfg.Producers < 0 || cfg.Producers > 16:
		return nil, &ConfigError{Field: "Producers", Reason: "must be 1..16"}
	case cfg.Producers == 0:
		cfg.Producers = 2
	}
	watch := &connWatch{}
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.WithHooks(watch)}, cfg.Opts...)
	s.free = make(chan *kgo.Client, cfg.Producers)
	for range cfg.Producers {
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			s.closeAll()
			return nil, &ConfigError{Field: "Opts", Reason: err.Error()}
		}
		if v, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); v {
			cl.Close()
			s.closeAll()
			return nil, &ConfigError{Field: "Opts", Reason: "idempotent writes are disabled (kgo.DisableIdempotentWrite); the Sender needs them"}
		}
		s.all = append(s.all, cl)
		s.free <- cl
	}
	s.cl, s.own = s.all[0], true
	s.diag = newDiagnosis(s.cl, watch)
	return s, nil
}

func (s *Sender) closeAll() {
	for _, cl := range s.all {
		cl.Close()
	}
}

func topicFunc(topic string, fn func(*mensageria.Delivery) string) (func(*mensageria.Delivery) string, error) {
	if fn != nil {
		return fn, nil
	}
	if topic == "" {
		return nil, &ConfigError{Field: "Topic", Reason: "required (or set TopicFor)"}
	}
	return func(*mensageria.Delivery) string { return topic }, nil
}

// destination names where a sender produces, for a dead letter's route.
func destination(topic string, fn func(*mensageria.Delivery) string) string {
	if fn != nil {
		return "kafka (topic per delivery)"
	}
	return topicDest(topic)
}

// topicDest names one topic in logs and dead letters.
func topicDest(topic string) string { return "kafka topic " + topic }

// Destination implements mensageria.DestinationNamer: "kafka topic t".
func (s *Sender) Destination() string { return s.dest }

// Client returns the producing client (the first of them, when the
// Sender built several).
func (s *Sender) Client() *kgo.Client { return s.cl }

// Close closes the clients if the Sender built them.
func (s *Sender) Close() {
	s.closeOnce.Do(func() {
		if s.own {
			s.closeAll()
		}
	})
}

// Check asks the cluster whether Topic exists and may be used, creating
// nothing (unless the client creates topics, kgo.AllowAutoTopicCreation:
// then the brokers create it now, where they allow it). It returns a
// *TopicError naming the topic and the Kafka error
// (UNKNOWN_TOPIC_OR_PARTITION for a missing topic, TOPIC_AUTHORIZATION_FAILED,
// or a partition without a leader), an *UnreachableError or the client's
// error when the cluster did not answer within ctx, and nil otherwise. A
// Sender with TopicFor has no one topic to check: nil.
func (s *Sender) Check(ctx context.Context) error {
	return s.memo.remember(s.check(ctx))
}

func (s *Sender) check(ctx context.Context) error {
	if s.topic == "" {
		return nil
	}
	answer, err := describeTopic(ctx, s.cl, s.topic, s.diag.create)
	if err != nil {
		if u := s.diag.watch.unreachable(); u != nil {
			return u
		}
		return fmt.Errorf("mensageria/kafka: asking the cluster about topic %q: %w", s.topic, err)
	}
	return answer
}

// UseRelaySettings implements mensageria.RelayAware: Client.Start calls
// it before the first claim, and the Sender checks its topic then. A topic
// that does not exist (UNKNOWN_TOPIC_OR_PARTITION, with the client not
// creating topics), whose name Kafka refuses, or that this client may not
// use fails Start with a *TopicError naming it. A cluster that does not
// answer within ten seconds is logged and does not fail Start: the
// messages wait in the outbox, and the Sender's errors say what is wrong
// once it answers. A topic picked per delivery is not checked.
func (s *Sender) UseRelaySettings(mensageria.RelaySettings) error {
	if s.topic == "" {
		s.log.Info("the Kafka topics are not checked at start: the topic is picked per delivery", "destination", s.dest)
		return nil
	}
	return checkAtStart(s.log, s.dest, s.checkTimeout, &s.memo, s.check)
}

// Send produces one message and waits for the brokers' acknowledgement.
func (s *Sender) Send(ctx context.Context, d *mensageria.Delivery) error {
	errs := s.SendBatch(ctx, []*mensageria.Delivery{d})
	if errs == nil {
		return nil
	}
	return errs[0]
}

// SendBatch produces every message at once and waits for all of them, or
// for ctx to end. The records are flushed while it waits rather than left
// to the client's linger. A message the brokers refuse for good (too
// large, an invalid record) comes back Permanent; a failure of the
// destination (the topic missing or refused, no leader, the cluster
// unreachable, no acknowledgement before ctx's deadline) comes back
// mensageria.Unavailable, with the cause the Sender found; the others are
// plain errors the relay retries. When a batch has waited a second, the
// Sender asks the cluster about its topics, and answers the records of a
// topic that is missing or refused at once instead of at the deadline.
func (s *Sender) SendBatch(ctx context.Context, ds []*mensageria.Delivery) []error {
	if len(ds) == 0 {
		return nil
	}
	start := time.Now()
	cl := s.cl
	if s.free != nil {
		select {
		case cl = <-s.free:
			defer func() { s.free <- cl }()
		case <-ctx.Done():
			return fill(len(ds), mensageria.Unavailable(&NoAckError{Topic: s.topicFor(ds[0]), Waited: time.Since(start), ctxErr: ctx.Err()}))
		}
	}
	b := newAcks(ctx, ds, s.topicFor)
	for i, d := range ds {
		cl.Produce(ctx, toRecord(b.topics[i], d), func(r *kgo.Record, err error) { b.answer(i, r.Partition, err) })
	}
	// The relay claims its next batch only when this one is answered, so
	// a linger (franz-go's is 10ms) would set its pace; flushing while
	// the batch waits sends its records now.
	flushCtx, stopFlush := context.WithCancel(ctx)
	go func() { _ = cl.Flush(flushCtx) }()
	causes := s.await(ctx, b)
	stopFlush()
	// Records given up for another batch's context (the client fails a
	// partition's buffered records together) have no cause yet: ask.
	for _, topic := range b.droppedEarly() {
		if _, ok := causes[topic]; !ok && ctx.Err() == nil {
			causes[topic] = s.diag.topic(ctx, topic)
		}
	}
	return b.results(func(topic string, ctxErr error) error {
		cause, checked := causes[topic]
		if u := s.diag.watch.unreachable(); u != nil {
			cause = u
		}
		return &NoAckError{Topic: topic, Waited: time.Since(start), Cause: cause, Checked: checked, ctxErr: ctxErr}
	})
}

// await waits for every answer of b, asking the cluster about its topics
// after diagnoseAfter (or half the time left, when shorter) and answering
// the records of a topic that is missing or refused with that; at ctx's
// end the records still waiting are left with ctx's error. It returns the
// causes found, by topic.
func (s *Sender) await(ctx context.Context, b *acks) map[string]error {
	wait := s.diagnoseAfter
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl)/2)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	causes := map[string]error{}
	select {
	case <-b.done:
		return causes
	case <-ctx.Done():
	case <-t.C:
		for _, topic := range b.waiting() {
			cause := s.diag.topic(ctx, topic)
			causes[topic] = cause
			if TopicRefused(cause) {
				b.fail(topic, cause)
			}
		}
		select {
		case <-b.done:
			return causes
		case <-ctx.Done():
		}
	}
	b.expire(ctx.Err())
	return causes
}

// acks collects the answers of one batch's records; answers that come
// after the batch ended (a record the deadline cut short) are dropped.
type acks struct {
	ctx    context.Context
	topics []string

	mu       sync.Mutex
	errs     []error
	parts    []int32
	answered []bool
	left     int
	ended    bool
	done     chan struct{}
}

func newAcks(ctx context.Context, ds []*mensageria.Delivery, topicFor func(*mensageria.Delivery) string) *acks {
	b := &acks{ctx: ctx, topics: make([]string, len(ds)), errs: make([]error, len(ds)), parts: make([]int32, len(ds)),
		answered: make([]bool, len(ds)), left: len(ds), done: make(chan struct{})}
	for i, d := range ds {
		b.topics[i] = topicFor(d)
	}
	if b.left == 0 {
		close(b.done)
	}
	return b
}

func (b *acks) answer(i int, part int32, err error) {
	if err != nil && b.ctx.Err() != nil && errors.Is(err, b.ctx.Err()) {
		// The client gives up a record when its context ends: that is
		// no answer from the cluster, and expire says what was found.
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended || b.answered[i] {
		return
	}
	b.answered[i], b.errs[i], b.parts[i] = true, err, part
	b.left--
	if b.left == 0 {
		close(b.done)
	}
}

// waiting returns the topics of the records still unanswered.
func (b *acks) waiting() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for i, t := range b.topics {
		if !b.answered[i] && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

// fail answers the unanswered records of topic with err.
func (b *acks) fail(topic string, err error) {
	for i, t := range b.topics {
		if t == topic {
			b.answer(i, -1, err)
		}
	}
}

// expire ends the batch: every record still unanswered gets err, the
// context's.
func (b *acks) expire(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended = true
	for i := range b.topics {
		if !b.answered[i] {
			b.answered[i], b.errs[i], b.parts[i] = true, err, -1
		}
	}
}

// droppedEarly returns the topics of records the client gave up for a
// context's end while this batch's context still runs.
func (b *acks) droppedEarly() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for i, err := range b.errs {
		if (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && b.ctx.Err() == nil && !slices.Contains(out, b.topics[i]) {
			out = append(out, b.topics[i])
		}
	}
	return out
}

// results classifies every answer.
// A record given up for a context's end, this batch's or (when the client
// fails every buffered record at once) another's, becomes noAck(topic,
// that error): the cluster did not answer it.
func (b *acks) results(noAck func(topic string, ctxErr error) error) []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended = true
	var out []error
	for i, err := range b.errs {
		if err == nil {
			continue
		}
		if out == nil {
			out = make([]error, len(b.errs))
		}
		var ne *NoAckError
		if (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && !errors.As(err, &ne) {
			err = noAck(b.topics[i], err)
		}
		out[i] = classify(b.topics[i], b.parts[i], err)
	}
	return out
}

func toRecord(topic string, d *mensageria.Delivery) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, 3+len(d.Headers))
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderMessageID, Value: []byte(d.ID.String())},
		kgo.RecordHeader{Key: HeaderType, Value: []byte(d.Type)},
	)
	if !d.CreatedAt.IsZero() {
		hs = append(hs, kgo.RecordHeader{Key: HeaderCreatedAt, Value: m2mwire.AppendTime(nil, d.CreatedAt)})
	}
	for k, v := range d.Headers {
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return &kgo.Record{Topic: topic, Key: []byte(d.Key), Value: d.Payload, Headers: hs}
}

var (
	_ mensageria.BatchSender      = (*Sender)(nil)
	_ mensageria.RelayAware       = (*Sender)(nil)
	_ mensageria.DestinationNamer = (*Sender)(nil)
)
