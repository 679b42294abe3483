package clienttest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriatest"
)

type ctxMark struct{}

// attemptHook stamps each message at enqueue and each attempt as it
// starts, and records how every attempt ended.
type attemptHook struct {
	mu   sync.Mutex
	ends []mensageria.DeliveryEvent
	seen []mensageria.Attempt
}

func (h *attemptHook) OnEnqueue(ctx context.Context, m *mensageria.Message) {
	v, _ := ctx.Value(ctxMark{}).(string)
	m.Headers["x-enqueued-in"] = v
	m.Headers["x-id"] = m.ID.String()
}

func (h *attemptHook) OnAttempt(ctx context.Context, a mensageria.Attempt) (context.Context, func(mensageria.DeliveryEvent)) {
	h.mu.Lock()
	h.seen = append(h.seen, a)
	h.mu.Unlock()
	mark := fmt.Sprintf("attempt-%d", a.Delivery.Attempt)
	a.Delivery.Headers["x-attempt"] = mark
	return context.WithValue(ctx, ctxMark{}, mark), func(ev mensageria.DeliveryEvent) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.ends = append(h.ends, ev)
	}
}

func (h *attemptHook) ended() []mensageria.DeliveryEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]mensageria.DeliveryEvent(nil), h.ends...)
}

// The enqueue hook writes the client's copy of the headers, never the
// caller's; each attempt's hook changes what its Sender gets (headers and
// context) and is told the attempt's settled outcome, with its context.
func TestAttemptAndEnqueueHooks(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		h := &attemptHook{}
		var mu sync.Mutex
		var sends []string
		failFirst := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
			mark, _ := ctx.Value(ctxMark{}).(string)
			mu.Lock()
			sends = append(sends, d.Headers["x-enqueued-in"]+"|"+d.Headers["x-attempt"]+"|"+mark+"|"+d.Headers["x-id"])
			mu.Unlock()
			if d.Attempt == 1 {
				return errors.New("not yet")
			}
			return nil
		})
		reg := mensageria.NewRegistry().MustRegister("hook.t", failFirst)
		cfg := fastConfig(uniqueApp("hooks"), reg)
		cfg.Hooks = []mensageria.Hook{h}
		c := newClient(t, b.open(), cfg)
		callers := map[string]string{"caller": "kept"}
		ctx := context.WithValue(context.Background(), ctxMark{}, "business")
		ids, err := c.Enqueue(ctx, mensageria.Message{Type: "hook.t", Key: "k1", Headers: callers})
		if err != nil {
			t.Fatal(err)
		}
		if len(callers) != 1 || callers["caller"] != "kept" {
			t.Fatalf("the caller's headers were written: %v", callers)
		}
		start(t, c)
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return len(h.ended()) >= 2 }, "two attempts ended")
		ends := h.ended()
		if ends[0].Outcome != mensageria.OutcomeRetry || ends[0].Attempt != 1 || ends[1].Outcome != mensageria.OutcomeDelivered || ends[1].Attempt != 2 {
			t.Fatalf("ends = %+v", ends)
		}
		for i, ev := range ends {
			want := fmt.Sprintf("attempt-%d", i+1)
			if got, _ := ev.Context.Value(ctxMark{}).(string); got != want {
				t.Errorf("end %d: event context carries %q, want %q", i, got, want)
			}
			if ev.Key != "k1" || ev.Route == "" || ev.Type != "hook.t" {
				t.Errorf("end %d: %+v", i, ev)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for i, s := range sends {
			want := fmt.Sprintf("business|attempt-%d|attempt-%d|%s", i+1, i+1, ids[0])
			if s != want {
				t.Errorf("send %d saw %q, want %q", i, s, want)
			}
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, a := range h.seen {
			if a.App != cfg.App || a.Route != ends[0].Route || a.Batch {
				t.Errorf("attempt = %+v", a)
			}
		}
	})
}

// A BatchSender's deliveries each start an attempt (marked Batch), and
// the headers the hook sets are what the batch carries.
func TestAttemptHookOnBatchSender(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		h := &attemptHook{}
		bs := &batchRecorder{}
		reg := mensageria.NewRegistry().MustRegister("hook.b", bs)
		cfg := fastConfig(uniqueApp("hooksb"), reg)
		cfg.Hooks = []mensageria.Hook{h}
		c := newClient(t, b.open(), cfg)
		if _, err := c.Enqueue(context.Background(), mensageria.Message{Type: "hook.b", Key: "a"}, mensageria.Message{Type: "hook.b", Key: "b"}); err != nil {
			t.Fatal(err)
		}
		start(t, c)
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return len(h.ended()) >= 2 }, "two attempts ended")
		bs.mu.Lock()
		defer bs.mu.Unlock()
		for _, d := range bs.got {
			if d.Headers["x-attempt"] != "attempt-1" {
				t.Errorf("batch delivery %s carried %v", d.Key, d.Headers)
			}
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, a := range h.seen {
			if !a.Batch {
				t.Errorf("attempt of a BatchSender not marked Batch: %+v", a)
			}
		}
	})
}

type batchRecorder struct {
	mu  sync.Mutex
	got []*mensageria.Delivery
}

func (r *batchRecorder) Send(ctx context.Context, d *mensageria.Delivery) error {
	return r.SendBatch(ctx, []*mensageria.Delivery{d})[0]
}

func (r *batchRecorder) SendBatch(_ context.Context, ds []*mensageria.Delivery) []error {
	r.mu.Lock()
	r.got = append(r.got, ds...)
	r.mu.Unlock()
	return nil
}

// An attempt cut short by Stop ends released, and no OnDelivery is told
// of it: the row goes back untried.
func TestAttemptCutShortByStopEndsReleased(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		h := &attemptHook{}
		var delivered []mensageria.DeliveryEvent
		var mu sync.Mutex
		inSend := make(chan struct{}, 1)
		blocking := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
			select {
			case inSend <- struct{}{}:
			default:
			}
			<-ctx.Done()
			return ctx.Err()
		})
		reg := mensageria.NewRegistry().MustRegister("hook.stop", blocking)
		cfg := fastConfig(uniqueApp("hookstop"), reg)
		cfg.Lease = 10 * time.Second
		cfg.Hooks = []mensageria.Hook{h, deliveryFunc(func(ev mensageria.DeliveryEvent) {
			mu.Lock()
			delivered = append(delivered, ev)
			mu.Unlock()
		})}
		c := newClient(t, b.open(), cfg)
		if _, err := c.Enqueue(context.Background(), mensageria.Message{Type: "hook.stop", Key: "k"}); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-inSend:
		case <-time.After(10 * time.Second):
			t.Fatal("the attempt never started")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_ = c.Stop(ctx) // cut short: the Sender sees its context cancelled
		ends := h.ended()
		if len(ends) != 1 || ends[0].Outcome != mensageria.OutcomeReleased {
			t.Fatalf("ends = %+v, want one released", ends)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(delivered) != 0 {
			t.Fatalf("OnDelivery told of a released attempt: %+v", delivered)
		}
		if n := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE state = 'pending' AND attempts = 0"); n != 1 {
			t.Fatalf("%d rows pending untried, want the one released", n)
		}
	})
}

type deliveryFunc func(mensageria.DeliveryEvent)

func (f deliveryFunc) OnDelivery(ev mensageria.DeliveryEvent) { f(ev) }

type enqueueFunc func(context.Context, *mensageria.Message)

func (f enqueueFunc) OnEnqueue(ctx context.Context, m *mensageria.Message) { f(ctx, m) }

// No OnEnqueue hook runs for a call that validation refuses; a header a
// hook makes invalid fails the call and stores nothing; only the headers
// are taken from the hook's copy.
func TestEnqueueHookSeesOnlyValidCalls(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		var calls atomic.Int64
		bad := false
		hook := enqueueFunc(func(_ context.Context, m *mensageria.Message) {
			calls.Add(1)
			m.Key = "changed by the hook" // not taken
			if bad {
				m.Headers[""] = "x"
			}
		})
		reg := mensageria.NewRegistry().MustRegister("hook.v", &recorder{})
		cfg := fastConfig(uniqueApp("hookv"), reg)
		cfg.Hooks = []mensageria.Hook{hook}
		c := newClient(t, b.open(), cfg)
		ctx := context.Background()
		_, err := c.Enqueue(ctx, mensageria.Message{Type: "hook.v", Key: "ok"}, mensageria.Message{Type: "hook.v", Key: ""})
		var ime *mensageria.InvalidMessageError
		if !errors.As(err, &ime) || ime.Index != 1 || calls.Load() != 0 {
			t.Fatalf("err %v, %d hook calls; want message 1 refused before any hook", err, calls.Load())
		}
		bad = true
		_, err = c.Enqueue(ctx, mensageria.Message{Type: "hook.v", Key: "k"})
		if !errors.As(err, &ime) || ime.Field != "Headers" {
			t.Fatalf("err %v, want the hook's invalid header refused", err)
		}
		bad = false
		if _, err := c.Enqueue(ctx, mensageria.Message{Type: "hook.v", Key: "kept"}); err != nil {
			t.Fatal(err)
		}
		if n := b.count("SELECT count(*) FROM " + b.table("outbox")); n != 1 {
			t.Fatalf("%d rows stored, want only the valid call's", n)
		}
		if n := b.count("SELECT count(*) FROM " + b.table("outbox") + " WHERE key = 'kept'"); n != 1 {
			t.Fatal("the hook changed the key")
		}
	})
}
