package mensageria_test

import (
	"context"
	"fmt"

	"github.com/xadm/mensageria"
)

// A Registry holds what the app may enqueue and how each type travels.
// Types registered with one Sender share one route: its order, rate and
// delivery mode.
func ExampleRegistry() {
	billing := mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil }) // m2mhttp.NewSender(...)
	payments := mensageria.SenderFunc(func(context.Context, *mensageria.Delivery) error { return nil })
	// Asks the payment provider whether a charge in doubt exists
	// (m2mhttp.NewProbe: a GET on a URL made from the natural key).
	charged := mensageria.ReconcilerFunc(func(context.Context, *mensageria.Delivery) (mensageria.Reconciliation, error) {
		return mensageria.Applied, nil
	})

	reg := mensageria.NewRegistry()
	reg.MustRegister("pedido.criado", billing)
	// One key's messages in enqueue order; a failing one holds only its key.
	reg.MustRegister("pedido.status", billing, mensageria.Ordered())
	// A receiver that cannot be made idempotent: at most one attempt that
	// may have reached it, at most 50 a second.
	reg.MustRegister("cobranca.debitar", payments, mensageria.Mode(mensageria.AtMostOnce),
		mensageria.Reconcile(charged), mensageria.MaxRate(50))

	for _, typ := range reg.Types() {
		rt, _ := reg.Route(typ)
		fmt.Printf("%s: ordered=%v mode=%v max-rate=%v reconciled=%v\n", typ, rt.Ordered, rt.Mode, rt.MaxRate, rt.Reconciler != nil)
	}
	// A type has one Sender: registering it again is refused.
	fmt.Println(reg.Register("pedido.criado", billing))
	// Output:
	// cobranca.debitar: ordered=false mode=at-most-once max-rate=50 reconciled=true
	// pedido.criado: ordered=false mode=at-least-once max-rate=0 reconciled=false
	// pedido.status: ordered=true mode=at-least-once max-rate=0 reconciled=false
	// mensageria: config Registry: type "pedido.criado" registered twice
}
