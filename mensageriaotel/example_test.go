package mensageriaotel_test

import (
	"context"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/mensageriaotel"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// The sending app: the Tracer is one of the client's hooks, and an order
// enqueued inside the business transaction's span carries that trace to
// the relay and on to the receiver.
func Example() {
	var drv driver.Driver // postgres.New(pool, ...)
	var tx pgx.Tx         // the business transaction
	var sender mensageria.Sender
	tracer := mensageriaotel.New(mensageriaotel.Config{}) // otel.GetTracerProvider(), W3C Trace Context
	client, err := mensageria.New(drv, &mensageria.Config{
		App:      "orders",
		Registry: mensageria.NewRegistry().MustRegister("order.placed", sender),
		Hooks:    []mensageria.Hook{tracer},
	})
	if err != nil {
		return
	}
	ctx, span := otel.Tracer("orders").Start(context.Background(), "place order")
	defer span.End()
	_, _ = client.EnqueueTx(ctx, tx, mensageria.Message{Type: "order.placed", Key: "order-1"})
}

// The receiving app: the effect runs in the message's process span, under
// the delivery attempt that carried it.
func ExampleTracer_Effect() {
	var inbox *mensageria.Inbox
	var apply mensageria.Effect
	tracer := mensageriaotel.New(mensageriaotel.Config{})
	_, _ = m2mhttp.NewReceiver(m2mhttp.ReceiverConfig{
		Tokens:   []string{"a-token"},
		Handlers: map[string]m2mhttp.Handler{"order.placed": {Inbox: inbox, Effect: tracer.Effect(apply)}},
	})
}
