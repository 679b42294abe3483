package mensageriaotel_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/transport/kafka"
	"github.com/xadm/mensageria/transport/nats"
)

// flakyKafka is a Kafka Sender whose first attempts fail before they
// reach the broker, so each message's delivery is retried by the relay.
type flakyKafka struct {
	*kafka.Sender
	failFirst
}

func (s *flakyKafka) Send(ctx context.Context, d *mensageria.Delivery) error {
	return s.SendBatch(ctx, []*mensageria.Delivery{d})[0]
}

func (s *flakyKafka) SendBatch(ctx context.Context, ds []*mensageria.Delivery) []error {
	return s.batchThrough(ctx, ds, s.Sender.SendBatch)
}

type flakyNATS struct {
	*nats.Sender
	failFirst
}

func (s *flakyNATS) Send(ctx context.Context, d *mensageria.Delivery) error {
	return s.SendBatch(ctx, []*mensageria.Delivery{d})[0]
}

func (s *flakyNATS) SendBatch(ctx context.Context, ds []*mensageria.Delivery) []error {
	return s.batchThrough(ctx, ds, s.Sender.SendBatch)
}

// onceFailing is a sink effect that records the message in a span of the
// business code's own and fails the first time, so the sink applies it
// again in a transaction of its own.
func onceFailing(tr *traced, s *shop, key func() string) func(ctx context.Context, tx mensageria.Tx) error {
	var tries atomic.Int64
	return func(ctx context.Context, tx mensageria.Tx) error {
		if err := s.applyEffect(tr, ctx, tx.Raw().(pgx.Tx), key()); err != nil {
			return err
		}
		if tries.Add(1) == 1 {
			return errors.New("the billing database blinked")
		}
		return nil
	}
}

// TestTraceAcrossKafka: business transaction → outbox → relay (its first
// attempt failing, retried) → kfake → kafka.Sink (its effect failing once,
// applied again) → effect, in one trace continued through the record's
// headers.
func TestTraceAcrossKafka(t *testing.T) {
	tr := newTraced(t)
	s := newShop(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	ks, err := kafka.NewSender(kafka.SenderConfig{Brokers: cluster.ListenAddrs(), Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ks.Close)
	sender := &flakyKafka{Sender: ks}
	c := startClient(t, s, tr, mensageria.NewRegistry().MustRegister("order.placed", sender))

	var current atomic.Pointer[kgo.Record]
	apply := onceFailing(tr, s, func() string { return string(current.Load().Key) })
	sink, err := kafka.NewSink(kafka.SinkConfig{
		Brokers: cluster.ListenAddrs(), Group: "billing", Topics: []string{"orders"}, Driver: s.drv,
		Opts:         []kgo.Opt{kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())},
		RetryBackoff: 10 * time.Millisecond, Logger: quietLogger(),
		Effect: tr.tracer.KafkaEffect(func(ctx context.Context, tx mensageria.Tx, r *kgo.Record) error {
			current.Store(r)
			return apply(ctx, tx)
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	runSink(t, sink.Run)

	business, id := placeOrder(t, tr, s, c, "order.placed", "order-k")
	waitFor(t, 30*time.Second, "the effect to commit", func() bool { return s.effects(t) == 1 && len(tr.named("process order.placed")) == 2 })
	waitFor(t, 10*time.Second, "the delivered attempt's span to end", func() bool { return len(tr.named("send order.placed")) == 2 })
	if sender.failed.Load() != 1 {
		t.Fatalf("%d first attempts failed, want 1", sender.failed.Load())
	}
	journey(t, tr, business, "order.placed", id, "order-k", "kafka", []string{"retry", "delivered"}, []int{1, 1})
}

// TestTraceAcrossNATS is TestTraceAcrossKafka through JetStream and a
// nats.Sink, the trace continued through the message's NATS headers.
func TestTraceAcrossNATS(t *testing.T) {
	nc, err := natsgo.Connect(testdb.NatsURL(), natsgo.Timeout(2*time.Second))
	if err != nil {
		testdb.Unavailable(t, "NATS at "+testdb.NatsURL(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("OTEL_%08x", rand.Uint32())
	subject := "otel." + name
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject + ".>"}, Duplicates: time.Hour, Storage: jetstream.MemoryStorage}); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
			testdb.Unavailable(t, "JetStream at "+testdb.NatsURL(), err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })

	tr := newTraced(t)
	s := newShop(t)
	ns, err := nats.NewSender(ctx, nats.SenderConfig{Conn: nc, Subject: subject + ".orders", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sender := &flakyNATS{Sender: ns}
	c := startClient(t, s, tr, mensageria.NewRegistry().MustRegister("order.placed", sender))

	var current atomic.Pointer[string]
	apply := onceFailing(tr, s, func() string { return *current.Load() })
	sink, err := nats.NewSink(nats.SinkConfig{
		Conn: nc, Stream: name, Consumer: "billing", Driver: s.drv,
		MaxWait: 100 * time.Millisecond, RetryBackoff: 10 * time.Millisecond, Logger: quietLogger(),
		Effect: tr.tracer.NATSEffect(func(ctx context.Context, tx mensageria.Tx, m jetstream.Msg) error {
			d, err := nats.DeliveryOf(m)
			if err != nil {
				return mensageria.Permanent(err)
			}
			current.Store(&d.Key)
			return apply(ctx, tx)
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	runSink(t, sink.Run)

	business, id := placeOrder(t, tr, s, c, "order.placed", "order-n")
	waitFor(t, 30*time.Second, "the effect to commit", func() bool { return s.effects(t) == 1 && len(tr.named("process order.placed")) == 2 })
	waitFor(t, 10*time.Second, "the delivered attempt's span to end", func() bool { return len(tr.named("send order.placed")) == 2 })
	journey(t, tr, business, "order.placed", id, "order-n", "nats", []string{"retry", "delivered"}, []int{1, 1})
}

// runSink runs a sink until the test ends.
func runSink(t *testing.T, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sink: %v", err)
		}
	})
}
