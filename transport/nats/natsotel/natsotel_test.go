package natsotel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriaotel"
	"github.com/xadm/mensageria/transport/nats"
	"github.com/xadm/mensageria/transport/nats/natsotel"
)

// ended hands each span to the test as it ends: the signal the test waits
// on, and the span to check.
type ended chan sdktrace.ReadOnlySpan

func (e ended) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e ended) OnEnd(s sdktrace.ReadOnlySpan)                   { e <- s }
func (e ended) Shutdown(context.Context) error                  { return nil }
func (e ended) ForceFlush(context.Context) error                { return nil }

func (e ended) next(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case s := <-e:
			if s.Name() == name {
				return s
			}
		case <-timeout:
			t.Fatalf("no span %q ended within 30s", name)
		}
	}
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	out := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value.Emit()
	}
	return out
}

// TestTraceAcrossNATS: a delivery published in an attempt's span through
// JetStream reaches a nats.Sink whose effect, wrapped by Effect, fails
// once and is applied again: each try is a "process" span, a child of the
// attempt and linked to it, with the message's type, id, key and
// transport; the failed try records its error. A message that is no
// mensageria delivery gets a span named after its subject.
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
	name := fmt.Sprintf("NATSOTEL_%08x", rand.Uint32())
	subject := "natsotel." + name
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	if _, err := js.CreateStream(sctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject + ".>"}, Duplicates: time.Hour, Storage: jetstream.MemoryStorage}); err != nil {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
			testdb.Unavailable(t, "JetStream at "+testdb.NatsURL(), err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })

	spans := make(ended, 64)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans), sdktrace.WithSampler(sdktrace.AlwaysSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	tracer := mensageriaotel.New(mensageriaotel.Config{TracerProvider: tp})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	sender, err := nats.NewSender(sctx, nats.SenderConfig{Conn: nc, Subject: subject + ".orders", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	pool := testdb.Pool(t)
	drv, err := postgres.New(pool, &postgres.Config{Schema: testdb.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drv.Migrate(context.Background(), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int64
	sink, err := nats.NewSink(nats.SinkConfig{
		Conn: nc, Stream: name, Consumer: "billing", Driver: drv,
		MaxWait: 100 * time.Millisecond, RetryBackoff: 10 * time.Millisecond, Logger: quiet,
		Effect: natsotel.Effect(tracer, func(ctx context.Context, tx mensageria.Tx, m jetstream.Msg) error {
			if !trace.SpanContextFromContext(ctx).IsValid() {
				return mensageria.Permanent(errors.New("the effect ran outside its span"))
			}
			if d, err := nats.DeliveryOf(m); err == nil && d.Key == "order-n" && tries.Add(1) == 1 {
				return errors.New("the billing database blinked")
			}
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sink.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sink: %v", err)
		}
	})

	// The attempt, as the relay's hook makes it: its context in the
	// delivery's traceparent.
	actx, attempt := tp.Tracer("relay").Start(context.Background(), "send order.placed")
	d := &mensageria.Delivery{ID: uuid.New(), Type: "order.placed", Key: "order-n", Payload: []byte(`{}`), CreatedAt: time.Now(), Attempt: 1, Headers: map[string]string{}}
	propagation.TraceContext{}.Inject(actx, propagation.MapCarrier(d.Headers))
	if err := sender.Send(actx, d); err != nil {
		t.Fatal(err)
	}
	attempt.End()
	spans.next(t, "send order.placed")

	for i, wantErr := range []bool{true, false} {
		s := spans.next(t, "process order.placed")
		if s.Parent().SpanID() != attempt.SpanContext().SpanID() || s.SpanContext().TraceID() != attempt.SpanContext().TraceID() || s.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("process span %d: parent %s in trace %s, kind %s; want the attempt %s, consumer", i, s.Parent().SpanID(), s.SpanContext().TraceID(), s.SpanKind(), attempt.SpanContext().SpanID())
		}
		if l := s.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != attempt.SpanContext().SpanID() {
			t.Errorf("process span %d links %v, want one, to the attempt", i, l)
		}
		a := attrs(s)
		for k, v := range map[attribute.Key]string{"messaging.destination.name": "order.placed", "messaging.message.id": d.ID.String(), mensageriaotel.AttrKey: "order-n", mensageriaotel.AttrTransport: "nats"} {
			if a[k] != v {
				t.Errorf("process span %d: %s = %q, want %q", i, k, a[k], v)
			}
		}
		if failed := s.Status().Code == codes.Error; failed != wantErr {
			t.Errorf("process span %d: status %v, want an error %v", i, s.Status(), wantErr)
		}
	}

	// A message published by something else: no mensageria headers.
	if _, err := js.Publish(sctx, subject+".foreign", []byte("x")); err != nil {
		t.Fatal(err)
	}
	s := spans.next(t, "process "+subject+".foreign")
	if s.Parent().IsValid() || s.Status().Code == codes.Error {
		t.Errorf("a foreign message's span: parent %s, status %v; want a root span, no error", s.Parent().SpanID(), s.Status())
	}
}
