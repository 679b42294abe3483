package mensageriaotel

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/transport/kafka"
	"github.com/xadm/mensageria/transport/nats"
)

// KafkaEffect wraps a kafka.Sink's effect so each record is applied in
// its message's "process" span, continued from the record's headers. A
// record that is not a mensageria delivery (no mensageria-id header) still
// gets a span, named after its topic.
func (t *Tracer) KafkaEffect(eff kafka.Effect) kafka.Effect {
	return func(ctx context.Context, tx mensageria.Tx, r *kgo.Record) error {
		rec := Received{Type: r.Topic, Key: string(r.Key), Transport: "kafka", Headers: map[string]string{}}
		for _, h := range r.Headers {
			rec.Headers[h.Key] = string(h.Value)
		}
		if d, err := kafka.DeliveryOf(r); err == nil {
			rec.Type, rec.ID = d.Type, d.ID.String()
		}
		return t.Process(ctx, rec, func(ctx context.Context) error { return eff(ctx, tx, r) })
	}
}

// NATSEffect wraps a nats.Sink's effect so each message is applied in its
// "process" span, continued from the message's headers. A message that is
// not a mensageria delivery still gets a span, named after its subject.
func (t *Tracer) NATSEffect(eff nats.Effect) nats.Effect {
	return func(ctx context.Context, tx mensageria.Tx, m jetstream.Msg) error {
		rec := Received{Type: m.Subject(), Transport: "nats", Headers: map[string]string{}}
		for k, vs := range m.Headers() {
			if len(vs) > 0 {
				rec.Headers[k] = vs[0]
			}
		}
		if d, err := nats.DeliveryOf(m); err == nil {
			rec.Type, rec.Key, rec.ID = d.Type, d.Key, d.ID.String()
		}
		return t.Process(ctx, rec, func(ctx context.Context) error { return eff(ctx, tx, m) })
	}
}
