package clienttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/mensageriatest"
)

// The inbox tells a conflict from a duplicate: the same key under another
// message id is a duplicate when the payload is the same document
// (whitespace aside), and a *ConflictError, with nothing applied, when it
// is another one, whatever the message id: the first message's own id
// with another payload (its row changed after it was applied) is a
// conflict too, and with its payload a duplicate. A record stored before
// payload digests existed stays a duplicate.
func TestInboxConflictVersusDuplicate(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		in, err := mensageria.NewInbox(b.open(), mensageria.InboxConfig{Consumer: "billing"})
		if err != nil {
			t.Fatal(err)
		}
		var ran atomic.Int32
		effect := func(context.Context, mensageria.Tx, *mensageria.Delivery) error { ran.Add(1); return nil }
		mk := func(key, payload string) *mensageria.Delivery {
			return &mensageria.Delivery{ID: uuid.Must(uuid.NewV7()), Type: "t", Key: key, Payload: json.RawMessage(payload), CreatedAt: time.Now(), Attempt: 1}
		}
		first := mk("o-1", `{"total": 10, "items": [1, 2]}`)
		if res, err := in.Apply(ctx, first, effect); err != nil || res.Duplicate {
			t.Fatalf("first: %+v %v", res, err)
		}
		same := mk("o-1", "{\n  \"total\":10,\"items\":[1,2]\n}")
		if res, err := in.Apply(ctx, same, effect); err != nil || !res.Duplicate || res.FirstID != first.ID {
			t.Fatalf("same document under another id: %+v %v; want a duplicate of %s", res, err, first.ID)
		}
		other := mk("o-1", `{"total": 11, "items": [1, 2]}`)
		res, err := in.Apply(ctx, other, effect)
		var ce *mensageria.ConflictError
		if !errors.As(err, &ce) || !errors.Is(err, mensageria.ErrConflict) || res.Duplicate {
			t.Fatalf("another document under the same key: %+v %v; want a *ConflictError", res, err)
		}
		if ce.Consumer != "billing" || ce.Key != "o-1" || ce.ID != other.ID || ce.FirstID != first.ID {
			t.Fatalf("conflict %+v: want consumer billing, key o-1, refused %s, first %s", ce, other.ID, first.ID)
		}
		redelivered := *first
		if res, err := in.Apply(ctx, &redelivered, effect); err != nil || !res.Duplicate || res.FirstID != first.ID {
			t.Fatalf("the first message's own id again: %+v %v; want a duplicate", res, err)
		}
		redelivered.Payload = json.RawMessage(`{"total": 12}`)
		res, err = in.Apply(ctx, &redelivered, effect)
		if !errors.As(err, &ce) || res.Duplicate || ce.ID != first.ID || ce.FirstID != first.ID {
			t.Fatalf("the first message's own id with another payload: %+v %v; want a *ConflictError naming it", res, err)
		}
		if n := ran.Load(); n != 1 {
			t.Fatalf("the effect ran %d times, want once", n)
		}

		// A record without a digest, as stored before digests existed.
		if err := b.open().InTx(ctx, func(ctx context.Context, tx driver.Tx) error {
			_, err := tx.InboxRecord(ctx, driver.InboxRecord{Consumer: "billing", Key: "legacy", MessageID: uuid.Must(uuid.NewV7())})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if res, err := in.Apply(ctx, mk("legacy", `{"any": "thing"}`), effect); err != nil || !res.Duplicate {
			t.Fatalf("a record without a digest: %+v %v; want a duplicate", res, err)
		}

		// In a batch, the conflict is that delivery's error alone: its
		// neighbours apply in the batch's one transaction, once.
		ran.Store(0)
		batch := []*mensageria.Delivery{mk("o-2", `{}`), mk("o-1", `{"total": 13}`), mk("o-3", `{}`)}
		results, errs := in.ApplyBatch(ctx, batch, effect)
		if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], mensageria.ErrConflict) {
			t.Fatalf("batch errors %v: want only the second to conflict", errs)
		}
		if results[0].Duplicate || results[2].Duplicate {
			t.Fatalf("batch results %+v", results)
		}
		if n := ran.Load(); n != 2 {
			t.Fatalf("the batch ran %d effects, want 2 (no fallback retried them)", n)
		}
	})
}

// End to end: a message enqueued again under another id with the same
// payload is a duplicate at the receiver; a different payload under the
// same key is refused as a conflict and parked dead with the reason.
func TestReenqueuedMessageConflictsOnlyWithAnotherPayload(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		in, err := mensageria.NewInbox(b.open(), mensageria.InboxConfig{Consumer: "receiver"})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		seen := map[string]int{} // "applied", "duplicate", "conflict"
		sender := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
			res, err := in.Apply(ctx, d, func(context.Context, mensageria.Tx, *mensageria.Delivery) error { return nil })
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, mensageria.ErrConflict):
				seen["conflict"]++
				return mensageria.Permanent(err)
			case err != nil:
				return err
			case res.Duplicate:
				seen["duplicate"]++
			default:
				seen["applied"]++
			}
			return nil
		})
		// Ordered: the three arrive in enqueue order.
		c := newClient(t, b.open(), fastConfig(uniqueApp("reenqueue"), mensageria.NewRegistry().MustRegister("t", sender, mensageria.Ordered())))
		for _, p := range []string{`{"total": 10}`, `{"total": 10}`, `{"total": 99}`} {
			if _, err := c.Enqueue(ctx, mensageria.Message{Type: "t", Key: "order-1", Payload: json.RawMessage(p)}); err != nil {
				t.Fatal(err)
			}
		}
		start(t, c)
		mensageriatest.Eventually(t, 20*time.Second, func() bool {
			return b.count("SELECT count(*) FROM "+b.table("outbox")+" WHERE state = 'pending'") == 0
		}, "all three settled")
		mu.Lock()
		defer mu.Unlock()
		if seen["applied"] != 1 || seen["duplicate"] != 1 || seen["conflict"] != 1 {
			t.Fatalf("receiver saw %v; want one applied, one duplicate, one conflict", seen)
		}
		dead, err := c.Driver().ListMessages(ctx, driver.ListFilter{State: driver.StateDead})
		if err != nil || len(dead) != 1 || string(dead[0].Payload) == "" || !contains(dead[0].LastError, "another payload") {
			t.Fatalf("dead rows %+v (%v): want the conflicting message with its reason", dead, err)
		}
	})
}
