package clienttest_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/mensageriatest"
)

// notOwned is what a running client's routes say the catalog took from it.
func notOwned(c *mensageria.Client) []string {
	var out []string
	for _, r := range c.Routes() {
		out = append(out, r.NotOwned...)
	}
	return out
}

func transfer(t *testing.T, d driver.Driver, typ, from, to string) {
	t.Helper()
	if err := d.Transfer(context.Background(), driver.TransferParams{Kind: driver.ResourceType, Name: typ, From: from, To: to}); err != nil {
		t.Fatal(err)
	}
}

func enqueueKeys(t *testing.T, c *mensageria.Client, typ, prefix string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range n {
		keys[i] = fmt.Sprintf("%s-%d", prefix, i)
		if _, err := c.Enqueue(context.Background(), mensageria.Message{Type: typ, Key: keys[i]}); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// A type moved by an operator while both apps' relays run: the old
// owner's relay stops claiming it within one lease (and says so: a log
// line naming the new owner, Routes().NotOwned) while its other types keep
// flowing, and every message of the type enqueued after that reaches the
// new owner's destination only; moved back while both run, it goes back the
// same way, the first app claiming it again with the Sender it kept.
func TestTransferReachesRunningRelays(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		const typ, other = "pedido.criado", "pedido.enviado"
		appA, appB := uniqueApp("pedidos"), uniqueApp("faturamento")
		sinkA, sinkA2, sinkB := &recorder{}, &recorder{}, &recorder{}
		logA, linesA := capture()
		cfgA := fastConfig(appA, mensageria.NewRegistry().MustRegister(typ, sinkA).MustRegister(other, sinkA2))
		cfgA.Logger = logA
		a := newClient(t, b.open(), cfgA)
		start(t, a)
		enqueueKeys(t, a, typ, "before", 5)
		mensageriatest.Eventually(t, 20*time.Second, func() bool { return len(sinkA.keys()) == 5 }, "the first owner delivers")

		moved := time.Now()
		transfer(t, b.open(), typ, appA, appB)
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return slices.Contains(notOwned(a), typ) }, "the old owner's relay notices")
		if took := time.Since(moved); took > cfgA.Lease+500*time.Millisecond {
			t.Errorf("the old owner noticed after %s, more than its lease of %s", took, cfgA.Lease)
		}
		if log := linesA.String(); !strings.Contains(log, "no longer gives this app a type it routes") || !strings.Contains(log, "owner="+appB) {
			t.Fatalf("the old owner's log does not say what it stopped claiming, and to whom it went:\n%s", log)
		}

		bb := newClient(t, b.open(), fastConfig(appB, mensageria.NewRegistry().MustRegister(typ, sinkB)))
		start(t, bb)
		keys := enqueueKeys(t, bb, typ, "after", 100)
		enqueueKeys(t, a, other, "other", 5)
		mensageriatest.Eventually(t, 30*time.Second, func() bool { return len(sinkB.keys()) == 100 }, "the new owner delivers every new message")
		mensageriatest.Eventually(t, 20*time.Second, func() bool { return len(sinkA2.keys()) == 5 }, "the old owner's other type keeps flowing")
		for _, k := range keys {
			if sinkA.keys()[k] != 0 {
				t.Fatalf("%s, enqueued after the old relay noticed, went to the old destination", k)
			}
		}

		// Back, with both running: the first app claims it again.
		transfer(t, b.open(), typ, appB, appA)
		mensageriatest.Eventually(t, 10*time.Second, func() bool {
			return slices.Contains(notOwned(bb), typ) && len(notOwned(a)) == 0
		}, "the relays follow the move back")
		if !strings.Contains(linesA.String(), "gives this app a type it routes again") {
			t.Fatalf("the first owner's log does not say it claims the type again:\n%s", linesA.String())
		}
		back := enqueueKeys(t, a, typ, "back", 50)
		mensageriatest.Eventually(t, 30*time.Second, func() bool {
			got := sinkA.keys()
			for _, k := range back {
				if got[k] != 1 {
					return false
				}
			}
			return true
		}, "the first owner delivers again")
		for _, k := range back {
			if sinkB.keys()[k] != 0 {
				t.Fatalf("%s, enqueued after the move back, went to the second app's destination", k)
			}
		}
		mensageriatest.Eventually(t, 20*time.Second, func() bool {
			return b.count("SELECT count(*) FROM "+b.table("outbox")+" WHERE state <> 'delivered'") == 0
		}, "every row settled")
	})
}

// A message the old owner's relay had claimed when the operator moved its
// type is delivered once, by that relay, to its destination, and settled:
// the new owner's relay never sends it.
func TestTransferLeavesAClaimedMessageToItsRelay(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		const typ = "pedido.criado"
		appA, appB := uniqueApp("pedidos"), uniqueApp("faturamento")
		sending, release := make(chan struct{}, 1), make(chan struct{})
		sinkA := &recorder{fail: func(d *mensageria.Delivery) error {
			if d.Key == "in-flight" {
				sending <- struct{}{}
				<-release
			}
			return nil
		}}
		sinkB := &recorder{}
		cfgA := fastConfig(appA, mensageria.NewRegistry().MustRegister(typ, sinkA))
		cfgA.Lease = 3 * time.Second // the send below waits for the transfer well inside it
		a := newClient(t, b.open(), cfgA)
		start(t, a)
		if _, err := a.Enqueue(context.Background(), mensageria.Message{Type: typ, Key: "in-flight"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sending:
		case <-time.After(20 * time.Second):
			t.Fatal("the message was never sent")
		}
		transfer(t, b.open(), typ, appA, appB)
		bb := newClient(t, b.open(), fastConfig(appB, mensageria.NewRegistry().MustRegister(typ, sinkB)))
		start(t, bb)
		close(release)
		mensageriatest.Eventually(t, 20*time.Second, func() bool {
			return b.count("SELECT count(*) FROM "+b.table("outbox")+" WHERE key = 'in-flight' AND state = 'pending'") == 0
		}, "the claimed message settled")
		// Messages enqueued before the old relay noticed may still be its
		// (within a lease); after, they are the new owner's.
		mensageriatest.Eventually(t, 10*time.Second, func() bool { return slices.Contains(notOwned(a), typ) }, "the old owner's relay notices")
		enqueueKeys(t, bb, typ, "later", 1)
		mensageriatest.Eventually(t, 20*time.Second, func() bool { return sinkB.keys()["later-0"] == 1 }, "the new owner delivers a later message")
		if sinkA.keys()["in-flight"] != 1 || sinkB.keys()["in-flight"] != 0 {
			t.Fatalf("the claimed message went %d time(s) to its relay's destination and %d to the new owner's; want once and never",
				sinkA.keys()["in-flight"], sinkB.keys()["in-flight"])
		}
	})
}
