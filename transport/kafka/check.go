package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// startCheckTimeout bounds the topic check at Start. A cluster that does
// not answer by then does not fail Start: the messages wait in the outbox.
const startCheckTimeout = 10 * time.Second

// diagnoseAfter is how long a batch waits for its acknowledgements before
// the sender asks the cluster what is wrong. A healthy cluster answers a
// batch in milliseconds; by then, waiting longer only helps if the brokers
// are slow, and a topic that is gone is known at once.
const diagnoseAfter = time.Second

// describeTopic asks the cluster about topic. It creates nothing unless
// create is set (the client creates topics, and then so does this, where
// the brokers allow it). The answer is nil when the topic exists and every
// partition has a leader; a *TopicError for what the cluster said about
// the topic or one of its partitions; or, when the request itself failed
// (the cluster did not answer), that error as the second result.
func describeTopic(ctx context.Context, cl *kgo.Client, topic string, create bool) (answer, reqErr error) {
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	req.AllowAutoTopicCreation = create
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	for _, t := range resp.Topics {
		if t.Topic == nil || *t.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return &TopicError{Topic: topic, Partition: -1, Err: err}, nil
		}
		if len(t.Partitions) == 0 {
			// Being created: the brokers know the name but have not
			// placed its partitions yet.
			return &TopicError{Topic: topic, Partition: -1, Err: kerr.LeaderNotAvailable}, nil
		}
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return &TopicError{Topic: topic, Partition: p.Partition, Err: err}, nil
			}
			if p.Leader < 0 {
				return &TopicError{Topic: topic, Partition: p.Partition, Err: kerr.LeaderNotAvailable}, nil
			}
		}
		return nil, nil
	}
	return &TopicError{Topic: topic, Partition: -1, Err: kerr.UnknownTopicOrPartition}, nil
}

// TopicRefused reports whether err (from Check, or Start) is the
// cluster's answer about a whole topic that makes a relay useless until
// someone changes the cluster or the config: the topic is missing
// (UNKNOWN_TOPIC_OR_PARTITION), its name invalid, or this client may not
// use it (TOPIC_AUTHORIZATION_FAILED). Start fails on those, naming the
// topic; a partition without a leader is a moment of the cluster's and
// does not.
func TopicRefused(err error) bool {
	var te *TopicError
	return errors.As(err, &te) && te.Partition < 0 &&
		(errors.Is(te.Err, kerr.UnknownTopicOrPartition) ||
			errors.Is(te.Err, kerr.UnknownTopicID) ||
			errors.Is(te.Err, kerr.InvalidTopicException) ||
			errors.Is(te.Err, kerr.TopicAuthorizationFailed))
}

// checkAtStart runs check within timeout for UseRelaySettings, unless
// Check answered within the last minute (the command checks every topic
// before it opens the database): a topic the cluster refuses or lacks
// fails Start. A cluster that cannot be asked does not: that is logged
// once, here, and the messages wait in the outbox; the relay's route
// breaker pauses the route on the batches' failures and logs the outage's
// start and end (docs/adr/0009).
func checkAtStart(log *slog.Logger, dest string, timeout time.Duration, memo *checkMemo, check func(context.Context) error) error {
	ok, err := memo.recent(time.Minute)
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		err = check(ctx)
	}
	switch {
	case err == nil:
		return nil
	case TopicRefused(err):
		return err
	}
	log.Warn(dest+" could not be checked at start; the relay starts anyway, its messages wait in the outbox without spending attempts, and its route pauses until the cluster answers",
		"destination", dest, "err", err)
	return nil
}

// checkMemo keeps the latest answer of a Sender's Check.
type checkMemo struct {
	mu  sync.Mutex
	at  time.Time
	err error
}

func (m *checkMemo) remember(err error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.at, m.err = time.Now(), err
	return err
}

// recent returns the answer remembered, when it is younger than within.
func (m *checkMemo) recent(within time.Duration) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.at.IsZero() || time.Since(m.at) > within {
		return false, nil
	}
	return true, m.err
}

// connWatch follows a client's connections (a kgo hook): the last attempt
// to connect to or read from a broker, so that a batch without
// acknowledgements can say that the cluster is unreachable and why.
type connWatch struct {
	mu     sync.Mutex
	broker string
	err    error // the last attempt's failure; nil after a success
}

func brokerAddr(meta kgo.BrokerMetadata) string {
	return net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
}

// OnBrokerConnect implements kgo.HookBrokerConnect.
func (w *connWatch) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
		return
	}
	w.note(meta, err)
}

// OnBrokerRead implements kgo.HookBrokerRead. Only a connection the broker
// dropped counts as a failure; the client closing its own (idle, or at
// Close) does not.
func (w *connWatch) OnBrokerRead(meta kgo.BrokerMetadata, _ int16, _ int, _, _ time.Duration, err error) {
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET) {
		return
	}
	w.note(meta, err)
}

func (w *connWatch) note(meta kgo.BrokerMetadata, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.broker, w.err = brokerAddr(meta), err
}

// unreachable returns an *UnreachableError when the last attempt failed.
func (w *connWatch) unreachable() error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		return nil
	}
	return &UnreachableError{Broker: w.broker, Err: w.err}
}

var (
	_ kgo.HookBrokerConnect = (*connWatch)(nil)
	_ kgo.HookBrokerRead    = (*connWatch)(nil)
)

// diagnosis finds out why a topic's records are not acknowledged, for the
// error each of them gets and the outage's log line: the cluster
// unreachable (from the client's connections), the topic missing or
// refused, a partition without a leader (from a metadata request).
// Concurrent batches share one request per topic at a time.
type diagnosis struct {
	cl     *kgo.Client
	watch  *connWatch // nil for a client the sender did not build
	create bool

	mu       sync.Mutex
	inflight map[string]chan struct{}
	last     map[string]error
}

func newDiagnosis(cl *kgo.Client, watch *connWatch) *diagnosis {
	create, _ := cl.OptValue(kgo.AllowAutoTopicCreation).(bool)
	return &diagnosis{cl: cl, watch: watch, create: create, inflight: map[string]chan struct{}{}, last: map[string]error{}}
}

// topic asks about topic within ctx and returns the cause found, nil when
// the cluster shows nothing wrong with it.
func (d *diagnosis) topic(ctx context.Context, topic string) error {
	d.mu.Lock()
	if wait, ok := d.inflight[topic]; ok {
		d.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.last[topic]
	}
	done := make(chan struct{})
	d.inflight[topic] = done
	d.mu.Unlock()

	cause, reqErr := describeTopic(ctx, d.cl, topic, d.create)
	if reqErr != nil {
		cause = d.watch.unreachable()
		if cause == nil {
			cause = fmt.Errorf("mensageria/kafka: the cluster did not answer a metadata request for topic %q: %w", topic, reqErr)
		}
	}
	d.mu.Lock()
	d.last[topic] = cause
	delete(d.inflight, topic)
	d.mu.Unlock()
	close(done)
	return cause
}
