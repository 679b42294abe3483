package mensageriaotel_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriaotel"
)

// BenchmarkTracing measures what tracing adds to one message: the create
// span at enqueue, one attempt's send span (its headers written and read)
// and the receiver's process span, on the SDK with a sampler that keeps
// every span and an exporter that drops them (the batch exporter's cost is
// the collector's business, off the delivery's path).
func BenchmarkTracing(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := mensageriaotel.New(mensageriaotel.Config{TracerProvider: tp})
	ctx, span := tp.Tracer("bench").Start(context.Background(), "business")
	defer span.End()
	id := uuid.New()
	noop := func(context.Context, mensageria.Tx, *mensageria.Delivery) error { return nil }
	effect := tr.Effect(noop)
	b.Run("enqueue", func(b *testing.B) {
		for b.Loop() {
			m := mensageria.Message{Type: "order.placed", Key: "order-1", ID: id, Headers: map[string]string{}}
			tr.OnEnqueue(ctx, &m)
		}
	})
	m := mensageria.Message{Type: "order.placed", Key: "order-1", ID: id, Headers: map[string]string{}}
	tr.OnEnqueue(ctx, &m)
	b.Run("attempt", func(b *testing.B) {
		for b.Loop() {
			d := &mensageria.Delivery{ID: id, Type: m.Type, Key: m.Key, Attempt: 1, Headers: map[string]string{"traceparent": m.Headers["traceparent"]}}
			_, end := tr.OnAttempt(context.Background(), mensageria.Attempt{App: "orders", Route: "orders → http x", Delivery: d})
			end(mensageria.DeliveryEvent{Outcome: mensageria.OutcomeDelivered})
		}
	})
	b.Run("process", func(b *testing.B) {
		d := &mensageria.Delivery{ID: id, Type: m.Type, Key: m.Key, Attempt: 1, Headers: map[string]string{"traceparent": m.Headers["traceparent"]}}
		for b.Loop() {
			_ = effect(context.Background(), nil, d)
		}
	})
}
