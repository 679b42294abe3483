package m2mhttp_test

import (
	"log"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// A route whose claimed batches travel as batch requests: the relay hands
// the BatchSender up to BatchSize messages of the type at once, and the
// receiver applies each request's envelopes in one inbox transaction.
func ExampleNewBatchSender() {
	sender, err := m2mhttp.NewBatchSender(m2mhttp.SenderConfig{
		URL:     "https://billing.internal/m2m",
		Token:   "token-shared-with-billing",
		Timeout: 10 * time.Second,
		// At most the receiver's MaxBatchItems (default 1000).
		MaxBatchItems: 100,
	})
	if err != nil {
		log.Fatal(err)
	}
	reg := mensageria.NewRegistry().MustRegister("order.closed", sender)
	_ = reg // mensageria.Config{App: "orders", Registry: reg, BatchSize: 500, ...}
}
