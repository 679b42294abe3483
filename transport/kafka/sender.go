package kafka

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/internal/wire"
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
	// Topic receives every message. Required unless TopicFor is set.
	Topic string
	// TopicFor picks the topic per delivery, for one Sender shared by
	// several routes. Default: Topic.
	TopicFor func(*mensageria.Delivery) string
}

// Sender delivers messages to Kafka on the idempotent producer: the record
// key is the natural key, so one key stays in one partition and in order;
// the message id and type travel in headers; the payload is the value.
type Sender struct {
	cl       *kgo.Client
	own      bool
	topicFor func(*mensageria.Delivery) string
	dest     string

	closeOnce sync.Once
}

// NewSender validates cfg and returns a Sender. It does not contact the
// cluster.
func NewSender(cfg SenderConfig) (*Sender, error) {
	topicFor, err := topicFunc(cfg.Topic, cfg.TopicFor)
	if err != nil {
		return nil, err
	}
	s := &Sender{topicFor: topicFor, dest: destination(cfg.Topic, cfg.TopicFor)}
	if cfg.Client != nil {
		// The redelivery-free retry inside a producer session is the one
		// guarantee this Sender promises; a client without it cannot keep
		// it, so refuse it instead of silently duplicating on retries.
		if v, _ := cfg.Client.OptValue(kgo.DisableIdempotentWrite).(bool); v {
			return nil, &ConfigError{Field: "Client", Reason: "idempotent writes are disabled (kgo.DisableIdempotentWrite); the Sender needs them"}
		}
		s.cl = cfg.Client
		return s, nil
	}
	if len(cfg.Brokers) == 0 {
		return nil, &ConfigError{Field: "Brokers", Reason: "set Client or Brokers"}
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.RequiredAcks(kgo.AllISRAcks())}, cfg.Opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, &ConfigError{Field: "Opts", Reason: err.Error()}
	}
	if v, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); v {
		cl.Close()
		return nil, &ConfigError{Field: "Opts", Reason: "idempotent writes are disabled (kgo.DisableIdempotentWrite); the Sender needs them"}
	}
	s.cl, s.own = cl, true
	return s, nil
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
	return "kafka topic " + topic
}

// Destination implements mensageria.DestinationNamer: "kafka topic t".
func (s *Sender) Destination() string { return s.dest }

// Client returns the producing client.
func (s *Sender) Client() *kgo.Client { return s.cl }

// Close closes the client if the Sender built it.
func (s *Sender) Close() {
	s.closeOnce.Do(func() {
		if s.own {
			s.cl.Close()
		}
	})
}

// Send produces one message and waits for the brokers' acknowledgement.
func (s *Sender) Send(ctx context.Context, d *mensageria.Delivery) error {
	errs := s.SendBatch(ctx, []*mensageria.Delivery{d})
	if errs == nil {
		return nil
	}
	return errs[0]
}

// SendBatch produces every message at once and waits for all of them. A
// message the brokers refuse for good (too large, no authorization) comes
// back Permanent; the others are retried by the relay.
func (s *Sender) SendBatch(ctx context.Context, ds []*mensageria.Delivery) []error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	wg.Add(len(ds))
	for i, d := range ds {
		s.cl.Produce(ctx, toRecord(s.topicFor(d), d), func(_ *kgo.Record, err error) {
			defer wg.Done()
			if err == nil {
				return
			}
			mu.Lock()
			if errs == nil {
				errs = make([]error, len(ds))
			}
			errs[i] = classify(err)
			mu.Unlock()
		})
	}
	wg.Wait()
	return errs
}

func toRecord(topic string, d *mensageria.Delivery) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, 3+len(d.Headers))
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderMessageID, Value: []byte(d.ID.String())},
		kgo.RecordHeader{Key: HeaderType, Value: []byte(d.Type)},
	)
	if !d.CreatedAt.IsZero() {
		hs = append(hs, kgo.RecordHeader{Key: HeaderCreatedAt, Value: wire.AppendTime(nil, d.CreatedAt)})
	}
	for k, v := range d.Headers {
		hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
	}
	return &kgo.Record{Topic: topic, Key: []byte(d.Key), Value: d.Payload, Headers: hs}
}

var (
	_ mensageria.BatchSender      = (*Sender)(nil)
	_ mensageria.DestinationNamer = (*Sender)(nil)
)
