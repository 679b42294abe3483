package mensageriaotel_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriaotel"
)

// FuzzProcessHeaders: whatever traceparent and tracestate a message
// arrives with (they come from outside: an HTTP envelope, a broker
// record), its process span is a child of the context they carry when it
// is valid and a new trace otherwise, never a panic; and the effect's copy
// of the delivery carries the process span's own traceparent.
func FuzzProcessHeaders(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "congo=t61rcWkgMzE")
	f.Add("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-extra", "a=b,c=d")
	f.Add("", "")
	f.Add("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", "")
	// Spans are made and dropped: no exporter holds millions of them.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
	tracer := mensageriaotel.New(mensageriaotel.Config{TracerProvider: tp})
	f.Fuzz(func(t *testing.T, traceparent, tracestate string) {
		headers := map[string]string{"traceparent": traceparent, "tracestate": tracestate}
		sent := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(headers)))
		d := &mensageria.Delivery{ID: uuid.New(), Type: "t", Key: "k", Headers: headers}
		var got trace.SpanContext
		var carried string
		err := tracer.Effect(func(ctx context.Context, _ mensageria.Tx, d *mensageria.Delivery) error {
			got = trace.SpanContextFromContext(ctx)
			carried = d.Headers["traceparent"]
			return nil
		})(context.Background(), nil, d)
		if err != nil {
			t.Fatal(err)
		}
		if !got.IsValid() {
			t.Fatalf("the effect ran outside a valid span (headers %q)", headers)
		}
		if sent.IsValid() && got.TraceID() != sent.TraceID() {
			t.Fatalf("process span in trace %s, not the sender's %s", got.TraceID(), sent.TraceID())
		}
		if want := "00-" + got.TraceID().String() + "-" + got.SpanID().String() + "-" + got.TraceFlags().String(); carried != want {
			t.Fatalf("the effect's delivery carries %q, want %q", carried, want)
		}
		if headers["traceparent"] != traceparent {
			t.Fatal("the received delivery's headers were written")
		}
	})
}
