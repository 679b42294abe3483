package clienttest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testsignal"
)

// sent is one Send as a timedSender saw it.
type sent struct {
	key string
	at  time.Time
}

// timedSender reports every Send, with the time it began, on a channel.
type timedSender chan sent

func (s timedSender) Send(ctx context.Context, d *mensageria.Delivery) error {
	select {
	case s <- sent{key: d.Key, at: time.Now()}:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// next waits for the next Send, failing t after within.
func (s timedSender) next(t *testing.T, within time.Duration, what string) sent {
	t.Helper()
	select {
	case got := <-s:
		return got
	case <-time.After(within):
		t.Fatalf("%s: no delivery within %s", what, within)
		return sent{}
	}
}

// A scheduled message is delivered no earlier than its NotBefore and
// promptly after it, although the relay polls only every 20 s: its first
// claim found nothing due, and it slept until the row came due instead of
// until the next poll. On an ordered route the message holds its key: a
// later message of the key without a NotBefore is not sent before it.
func TestScheduledMessageIsDeliveredAtItsTime(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		snd := make(timedSender, 8)
		reg := mensageria.NewRegistry().
			MustRegister("sched.plain", snd).
			MustRegister("sched.ordered", snd, mensageria.Ordered())
		cfg := fastConfig(uniqueApp("sched"), reg)
		cfg.Lease = 30 * time.Second
		cfg.PollInterval = 20 * time.Second
		c := newClient(t, b.open(), cfg)
		ctx := context.Background()
		// Enqueued before Start, and due well after it: the relay's first
		// claim comes before the due time, so only a timer set from what
		// the database reports delivers on time.
		notBefore := time.Now().Add(2 * time.Second)
		if _, err := c.Enqueue(ctx,
			mensageria.Message{Type: "sched.plain", Key: "p", NotBefore: notBefore},
			mensageria.Message{Type: "sched.ordered", Key: "k", NotBefore: notBefore},
			mensageria.Message{Type: "sched.ordered", Key: "k"}); err != nil {
			t.Fatal(err)
		}
		if st := stats(t, c.Driver(), "sched.ordered"); st.Scheduled != 1 || st.Pending != 1 {
			t.Fatalf("stats of the ordered type before Start: %+v, want 1 scheduled and 1 pending", st)
		}
		sig := testsignal.ForClient(c)
		start(t, c)
		if first := sig.Claimed.WaitOrTimeout(t); first.Err != nil || first.Rows != 0 {
			t.Fatalf("the relay's first claim: %+v; want nothing, %s before the due time (the ordered key's later message waits behind its scheduled head)",
				first, time.Until(notBefore))
		}
		keys := map[string]bool{}
		for range 2 {
			got := snd.next(t, 5*time.Second, "the scheduled messages")
			keys[got.key] = true
			if got.at.Before(notBefore) {
				t.Fatalf("%q sent at %s, before its NotBefore %s", got.key, got.at.Format(time.StampMicro), notBefore.Format(time.StampMicro))
			}
			if late := got.at.Sub(notBefore); late > time.Second {
				t.Fatalf("%q sent %s after its NotBefore: the relay waited for its poll, not for the row's due time", got.key, late)
			}
		}
		if !keys["p"] || !keys["k"] {
			t.Fatalf("sent keys %v, want p and k", keys)
		}
	})
}

// A NotBefore the backends cannot store is refused before anything is
// written; one in the past is delivered at once; a NotBefore's
// nanoseconds round up, never down, so rounding cannot deliver early.
func TestNotBeforeValidation(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		snd := make(timedSender, 8)
		reg := mensageria.NewRegistry().MustRegister("sched.v", snd)
		c := newClient(t, b.open(), fastConfig(uniqueApp("schedv"), reg))
		ctx := context.Background()
		_, err := c.Enqueue(ctx, mensageria.Message{Type: "sched.v", Key: "far", NotBefore: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)})
		var ime *mensageria.InvalidMessageError
		if !errors.As(err, &ime) || ime.Field != "NotBefore" {
			t.Fatalf("Enqueue with a NotBefore in year 10000: %v, want an *InvalidMessageError on NotBefore", err)
		}
		if n := b.count("SELECT count(*) FROM " + b.table("outbox")); n != 0 {
			t.Fatalf("%d rows written by a refused enqueue", n)
		}
		last := time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
		p, _, err := c.PrepareEnqueue(
			mensageria.Message{Type: "sched.v", Key: "last", NotBefore: last},
			mensageria.Message{Type: "sched.v", Key: "ns", NotBefore: time.Date(2030, 1, 1, 0, 0, 0, 1, time.UTC)})
		if err != nil {
			t.Fatalf("PrepareEnqueue with the last storable microsecond: %v", err)
		}
		if got, want := p.Rows[1].NotBefore, time.Date(2030, 1, 1, 0, 0, 0, 1000, time.UTC); !got.Equal(want) {
			t.Fatalf("NotBefore 1ns past a microsecond stored as %s, want %s (rounded up)", got, want)
		}

		start(t, c)
		if _, err := c.Enqueue(ctx, mensageria.Message{Type: "sched.v", Key: "past", NotBefore: time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)}); err != nil {
			t.Fatal(err)
		}
		if got := snd.next(t, 5*time.Second, "a message scheduled in the past"); got.key != "past" {
			t.Fatalf("delivered %q", got.key)
		}
	})
}

func stats(t *testing.T, d driver.Driver, typ string) driver.TypeStats {
	t.Helper()
	all, err := d.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Type == typ {
			return s
		}
	}
	return driver.TypeStats{Type: typ}
}
