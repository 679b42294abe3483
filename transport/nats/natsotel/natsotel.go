// Package natsotel traces the effects of a nats.Sink with mensageriaotel:
// each message is applied in its "process" span, continued from the
// message's headers (the delivery attempt that published it). It is a
// module of its own, as franz-go keeps kotel: an app that traces only HTTP
// does not pull in nats.go, and one that consumes JetStream without
// tracing does not pull in OpenTelemetry (docs/adr/0027).
package natsotel

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriaotel"
	"github.com/xadm/mensageria/transport/nats"
)

// Effect wraps a nats.Sink's effect so each message is applied in its
// "process" span, continued from the message's headers. A message that is
// not a mensageria delivery still gets a span, named after its subject.
func Effect(t *mensageriaotel.Tracer, eff nats.Effect) nats.Effect {
	return func(ctx context.Context, tx mensageria.Tx, m jetstream.Msg) error {
		rec := mensageriaotel.Received{Type: m.Subject(), Transport: "nats", Headers: map[string]string{}}
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
