package clienttest_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriatest"
)

// On an ordered route a key's next message is claimable only once its head
// settles, and nothing is enqueued then to notify the relay: the settle
// itself wakes the claim loop. With the poll a minute away, the second
// message arrives only if it does.
func TestOrderedKeysNextMessageFollowsItsHeadWithoutThePoll(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := context.Background()
		var mu sync.Mutex
		var got []string
		sender := mensageria.SenderFunc(func(ctx context.Context, d *mensageria.Delivery) error {
			mu.Lock()
			first := len(got) == 0
			got = append(got, string(d.Payload))
			mu.Unlock()
			if first {
				// Longer than the claim loop lingers after rows
				// (NotifyDebounce): it has gone idle when the head settles.
				time.Sleep(100 * time.Millisecond)
			}
			return nil
		})
		cfg := fastConfig(uniqueApp("ordwake"), mensageria.NewRegistry().MustRegister("t", sender, mensageria.Ordered()))
		cfg.Lease, cfg.PollInterval = 2*time.Minute, time.Minute
		c := newClient(t, b.open(), cfg)
		for _, p := range []string{`"head"`, `"next"`} {
			if _, err := c.Enqueue(ctx, mensageria.Message{Type: "t", Key: "k", Payload: []byte(p)}); err != nil {
				t.Fatal(err)
			}
		}
		start(t, c)
		mensageriatest.Eventually(t, 10*time.Second, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == 2
		}, "the key's next message after its head")
		mu.Lock()
		defer mu.Unlock()
		if got[0] != `"head"` || got[1] != `"next"` {
			t.Fatalf("delivered %v; want head then next", got)
		}
	})
}
