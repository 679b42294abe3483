// Package kafkaotel traces the effects of a kafka.Sink with
// mensageriaotel: each record is applied in its message's "process" span,
// continued from the record's headers (the delivery attempt that produced
// it). It is a module of its own, as franz-go keeps kotel: an app that
// traces only HTTP does not pull in franz-go, and one that consumes Kafka
// without tracing does not pull in OpenTelemetry (docs/adr/0027).
package kafkaotel

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriaotel"
	"github.com/xadm/mensageria/transport/kafka"
)

// Effect wraps a kafka.Sink's effect so each record is applied in its
// message's "process" span, continued from the record's headers. A
// record that is not a mensageria delivery (no mensageria-id header) still
// gets a span, named after its topic.
func Effect(t *mensageriaotel.Tracer, eff kafka.Effect) kafka.Effect {
	return func(ctx context.Context, tx mensageria.Tx, r *kgo.Record) error {
		rec := mensageriaotel.Received{Type: r.Topic, Key: string(r.Key), Transport: "kafka", Headers: map[string]string{}}
		for _, h := range r.Headers {
			rec.Headers[h.Key] = string(h.Value)
		}
		if d, err := kafka.DeliveryOf(r); err == nil {
			rec.Type, rec.ID = d.Type, d.ID.String()
		}
		return t.Process(ctx, rec, func(ctx context.Context) error { return eff(ctx, tx, r) })
	}
}
