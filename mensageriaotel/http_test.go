package mensageriaotel_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/internal/testsignal"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// TestTraceAcrossHTTP: an order placed inside a traced business
// transaction is enqueued, relayed over m2mhttp to a Receiver whose inbox
// effect fails the first time and applies the second: one trace from the
// business span through both attempts to the effect, with the W3C
// traceparent on the wire naming the attempt that carried it.
func TestTraceAcrossHTTP(t *testing.T) { traceAcrossHTTP(t, false) }

// TestTraceAcrossHTTPBatch is TestTraceAcrossHTTP with a BatchSender: each
// envelope of the batch carries its own attempt's context.
func TestTraceAcrossHTTPBatch(t *testing.T) { traceAcrossHTTP(t, true) }

func traceAcrossHTTP(t *testing.T, batch bool) {
	tr := newTraced(t)
	s := newShop(t)
	inbox, err := mensageria.NewInbox(s.drv, mensageria.InboxConfig{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int64
	// A failing effect in a batch is run again alone before the batch
	// answers, so a batch fails its item only on a second failure.
	failures := int64(1)
	if batch {
		failures = 2
	}
	var unnamed atomic.Int64 // effects whose delivery's traceparent is not their process span
	effect := func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
		sc := trace.SpanContextFromContext(ctx)
		if d.Headers["traceparent"] != "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-01" {
			unnamed.Add(1)
		}
		if err := s.applyEffect(tr, ctx, tx.Raw().(pgx.Tx), d.Key); err != nil {
			return err
		}
		if tries.Add(1) <= failures {
			return errors.New("the billing database blinked") // rolled back: retried
		}
		return nil
	}
	rc, err := m2mhttp.NewReceiver(m2mhttp.ReceiverConfig{
		Tokens:   []string{"tok"},
		Handlers: map[string]m2mhttp.Handler{"order.placed": {Inbox: inbox, Effect: tr.tracer.Effect(effect)}},
		Logger:   quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var wire []string // the traceparent headers of the requests
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		wire = append(wire, r.Header.Get("traceparent"))
		mu.Unlock()
		rc.ServeHTTP(w, r)
	}))
	defer srv.Close()

	scfg := m2mhttp.SenderConfig{URL: srv.URL, Token: "tok", Timeout: 4 * time.Second} // inside the 5s lease's delivery window
	var sender mensageria.Sender
	if batch {
		sender, err = m2mhttp.NewBatchSender(scfg)
	} else {
		sender, err = m2mhttp.NewSender(scfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	c := startClient(t, s, tr, mensageria.NewRegistry().MustRegister("order.placed", sender))
	business, id := placeOrder(t, tr, s, c, "order.placed", "order-1")

	testsignal.Eventually(t, 30*time.Second, func() bool { return len(tr.named("send order.placed")) == 2 }, "the second attempt's span to end")
	if n := s.effects(t); n != 1 {
		t.Fatalf("%d effects applied, want 1", n)
	}
	if n := unnamed.Load(); n > 0 {
		t.Errorf("%d effects got a traceparent other than their process span's", n)
	}
	// A receiver's failure is its destination's (a 500): the first attempt
	// is postponed, uncounted, and the second, attempt 1 again, applies.
	if !batch {
		journey(t, tr, business, "order.placed", id, "order-1", "", []string{"postponed", "delivered"}, []int{0, 1})
	} else {
		// A batch's item result is the message's own: a counted retry,
		// after the effect ran in the batch and then alone.
		journey(t, tr, business, "order.placed", id, "order-1", "", []string{"retry", "delivered"}, []int{0, 0, 1})
	}
	if !batch {
		mu.Lock()
		defer mu.Unlock()
		sends := tr.named("send order.placed")
		if len(wire) != 2 {
			t.Fatalf("%d requests, want 2", len(wire))
		}
		for _, tp := range wire {
			ok := false
			for _, s := range sends {
				ok = ok || tp == "00-"+s.SpanContext.TraceID().String()+"-"+s.SpanContext.SpanID().String()+"-01"
			}
			if !ok {
				t.Errorf("traceparent %q on the wire names no attempt span", tp)
			}
		}
	}
}
