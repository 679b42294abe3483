// Package mensageriaotel traces mensageria's messages with OpenTelemetry,
// in the spirit of franz-go's kotel: a hook for the Client
// (Config.Hooks) and wrappers for the receiving effects. It depends on the
// OpenTelemetry API only; the program chooses the SDK and its exporter.
//
// A message's trace, with W3C Trace Context carried in its headers
// (traceparent, tracestate), and span names and attributes after the
// OpenTelemetry messaging semantic conventions:
//
//   - Enqueue and EnqueueTx start a "create <type>" span (PRODUCER), a
//     child of the enqueuing code's span, and store its context with the
//     message: the business transaction's trace goes on past the outbox.
//   - Each delivery attempt is a "send <type>" span (CLIENT), a child of
//     the creation context and linked to it, with the type, key, attempt,
//     route and the settled outcome; its context replaces the traceparent
//     the Sender carries, so the destination continues from the attempt.
//   - A receiver's effect wrapped with Effect (a Kafka or NATS sink's
//     with kafkaotel.Effect or natsotel.Effect, modules of their own
//     beside each transport) runs in a "process <type>" span (CONSUMER),
//     a child of the attempt that carried the message and linked to it;
//     the effect's own spans hang under it.
package mensageriaotel

import (
	"context"
	"errors"
	"maps"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/redact"
)

// ScopeName is the instrumentation scope of the spans this package makes.
const ScopeName = "github.com/xadm/mensageria/mensageriaotel"

// System is the messaging.system of every span.
const System = "mensageria"

// The attributes this package adds beyond the semantic conventions' own,
// in the messaging.<system>.* namespace the conventions give a system.
const (
	AttrKey       = attribute.Key("messaging.mensageria.message.key")
	AttrAttempt   = attribute.Key("messaging.mensageria.attempt")
	AttrOutcome   = attribute.Key("messaging.mensageria.outcome")
	AttrRoute     = attribute.Key("messaging.mensageria.route")
	AttrApp       = attribute.Key("messaging.mensageria.app")
	AttrTransport = attribute.Key("messaging.mensageria.transport")
)

// Config configures a Tracer. The zero value is usable.
type Config struct {
	// TracerProvider makes the spans. Default otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// Propagator reads and writes the trace context in message headers.
	// Default propagation.TraceContext{} (W3C Trace Context). A propagator
	// that carries baggage stores it with every message: what baggage
	// holds is then in the outbox and at every destination.
	Propagator propagation.TextMapPropagator
}

// Tracer is the hook (OnEnqueue, OnAttempt) and the receivers' wrappers.
// It is safe for concurrent use.
type Tracer struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

// New returns a Tracer.
func New(cfg Config) *Tracer {
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	prop := cfg.Propagator
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	return &Tracer{tracer: tp.Tracer(ScopeName), prop: prop}
}

var (
	_ mensageria.OnEnqueue = (*Tracer)(nil)
	_ mensageria.OnAttempt = (*Tracer)(nil)
)

// OnEnqueue starts and ends the message's "create" span, a child of the
// span in ctx (or, when ctx has none, of a traceparent the caller put in
// the message's headers itself), and stores its context in the headers.
func (t *Tracer) OnEnqueue(ctx context.Context, m *mensageria.Message) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = t.prop.Extract(ctx, carrier(m.Headers))
	}
	ctx, span := t.tracer.Start(ctx, "create "+m.Type,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String(System),
			semconv.MessagingOperationName("create"),
			semconv.MessagingOperationTypeCreate,
			semconv.MessagingDestinationName(m.Type),
			semconv.MessagingMessageID(m.ID.String()),
			AttrKey.String(m.Key),
		))
	defer span.End()
	t.prop.Inject(ctx, carrier(m.Headers))
}

// OnAttempt starts the attempt's "send" span and writes its context into
// the delivery's headers; the span ends with the attempt's settled
// outcome.
func (t *Tracer) OnAttempt(ctx context.Context, a mensageria.Attempt) (context.Context, func(mensageria.DeliveryEvent)) {
	d := a.Delivery
	created := trace.SpanContextFromContext(t.prop.Extract(context.Background(), carrier(d.Headers)))
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String(System),
			semconv.MessagingOperationName("send"),
			semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationName(d.Type),
			semconv.MessagingMessageID(d.ID.String()),
			AttrKey.String(d.Key),
			AttrAttempt.Int(d.Attempt),
			AttrRoute.String(a.Route),
			AttrApp.String(a.App),
		),
	}
	if created.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, created)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: created}))
	}
	if a.Batch {
		opts = append(opts, trace.WithAttributes(semconv.MessagingBatchMessageCount(1)))
	}
	ctx, span := t.tracer.Start(ctx, "send "+d.Type, opts...)
	t.prop.Inject(ctx, carrier(d.Headers))
	return ctx, func(ev mensageria.DeliveryEvent) {
		span.SetAttributes(AttrOutcome.String(string(ev.Outcome)))
		switch ev.Outcome {
		case mensageria.OutcomeDelivered:
			span.SetStatus(codes.Ok, "")
		case mensageria.OutcomeReleased:
			// Stopped under the attempt: nothing failed.
		default:
			span.SetAttributes(semconv.ErrorTypeKey.String(string(ev.Outcome)))
			if ev.Err != nil {
				// A span leaves the process: no secret of a URL the
				// error quotes goes with it.
				err := redact.Error(ev.Err)
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			} else {
				span.SetStatus(codes.Error, string(ev.Outcome))
			}
		}
		span.End()
	}
}

// Received names a message as a receiver got it, for Process.
type Received struct {
	Type, Key, ID string
	// Transport names what carried it ("kafka", "nats"); empty for an
	// effect wrapped with Effect, whose caller knows.
	Transport string
	// Headers are the message's headers; only the propagator's are read.
	Headers map[string]string
}

// Process runs fn in the message's "process" span, a child of the
// context its headers carry (the attempt that sent it) and linked to it;
// an error fn returns is recorded on the span and returned.
func (t *Tracer) Process(ctx context.Context, r Received, fn func(ctx context.Context) error) error {
	sent := trace.SpanContextFromContext(t.prop.Extract(context.Background(), carrier(r.Headers)))
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			semconv.MessagingSystemKey.String(System),
			semconv.MessagingOperationName("process"),
			semconv.MessagingOperationTypeProcess,
			semconv.MessagingDestinationName(r.Type),
			semconv.MessagingMessageID(r.ID),
			AttrKey.String(r.Key),
		),
	}
	if r.Transport != "" {
		opts = append(opts, trace.WithAttributes(AttrTransport.String(r.Transport)))
	}
	if sent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sent)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sent}))
	}
	ctx, span := t.tracer.Start(ctx, "process "+r.Type, opts...)
	defer span.End()
	err := fn(ctx)
	if err != nil {
		shown := redact.Error(err)
		span.RecordError(shown)
		span.SetStatus(codes.Error, shown.Error())
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
	}
	return err
}

// errorType is the error.type of a failed effect: what the sender will
// make of it.
func errorType(err error) string {
	switch {
	case errors.Is(err, mensageria.ErrStale):
		return "stale"
	case errors.Is(err, mensageria.ErrConflict):
		return "conflict"
	case mensageria.IsPermanent(err):
		return "refused"
	}
	return "retry"
}

// Effect wraps an inbox effect (an m2mhttp.Handler's, or any
// Inbox.Apply's) so it runs in the message's "process" span. The effect
// gets a copy of the delivery whose headers carry the process span's
// context: what it stores or sends on with them (m2mhttp.QueueHandler
// keeps them in the inbox queue row, for the app that applies it by SQL)
// continues the trace from the receipt.
func (t *Tracer) Effect(eff mensageria.Effect) mensageria.Effect {
	return func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
		r := Received{Type: d.Type, Key: d.Key, ID: d.ID.String(), Headers: d.Headers}
		return t.Process(ctx, r, func(ctx context.Context) error {
			cp := *d
			cp.Headers = make(map[string]string, len(d.Headers)+1)
			maps.Copy(cp.Headers, d.Headers)
			t.prop.Inject(ctx, carrier(cp.Headers))
			return eff(ctx, tx, &cp)
		})
	}
}

// carrier reads and writes a message's headers for a propagator. Header
// names are matched without regard to case on reading, as the
// transports' own conventions differ (NATS and HTTP capitalise).
type carrier map[string]string

func (c carrier) Get(key string) string {
	if v, ok := c[key]; ok {
		return v
	}
	for k, v := range c {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}

func (c carrier) Set(key, value string) {
	if c == nil {
		return
	}
	for k := range c {
		if k != key && strings.EqualFold(k, key) {
			delete(c, k)
		}
	}
	c[key] = value
}

func (c carrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}
