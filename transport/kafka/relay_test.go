package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
)

// settleFault makes the database lose the relay's settles, as if the relay
// died right after the Kafka commit: the rows stay leased, then come back.
type settleFault struct {
	driver.Driver
	failing atomic.Bool
	lost    atomic.Int64
}

func (f *settleFault) Settle(ctx context.Context, p driver.SettleParams) (driver.SettleResult, error) {
	if f.failing.Load() {
		f.lost.Add(int64(len(p.Delivered)))
		return driver.SettleResult{}, errors.New("injected: relay died before the settle")
	}
	return f.Driver.Settle(ctx, p)
}

func pendingRows(t testing.TB, drv driver.Driver) int64 {
	t.Helper()
	st, err := drv.Stats(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, s := range st {
		n += s.Pending + s.InFlight
	}
	return n
}

// The real relay over PostgreSQL into Kafka, with every settle lost for a
// while: the batches are re-claimed after their lease by the same relay,
// then by a restarted one with a new sender; a read_committed consumer
// still sees every message once.
func TestRelayIntoKafkaExactlyOnceAcrossLostSettles(t *testing.T) {
	store := newPGStore(t)
	c := newCluster(t, "orders")
	fault := &settleFault{Driver: store.drv}
	fault.failing.Store(true)

	newClient := func(ts *TransactionalSender) *mensageria.Client {
		reg := mensageria.NewRegistry().MustRegister("order", ts)
		cl, err := mensageria.New(fault, &mensageria.Config{
			App: "shop", Registry: reg, Lease: time.Second, PollInterval: 50 * time.Millisecond,
			BatchSize: 40, BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	ts1 := newTxSender(t, c, "mensageria-relay-shop")
	cl1 := newClient(ts1)
	const n = 200
	var ids []string
	for i := range n {
		got, err := cl1.Enqueue(testCtx(t), mensageria.Message{Type: "order", Key: fmt.Sprintf("o-%d", i%17), Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got[0].String())
	}
	if err := cl1.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Every row is committed to Kafka, unsettled, claimed again after the
	// lease and answered from the positions.
	waitFor(t, 30*time.Second, "in-process reconciliation", func() bool { return ts1.Reconciled() >= 40 })
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = cl1.Stop(stopCtx)
	cancel()
	ts1.Close() // the process is gone

	fault.failing.Store(false)
	ts2 := newTxSender(t, c, "mensageria-relay-shop")
	cl2 := newClient(ts2)
	if err := cl2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "outbox drained", func() bool { return pendingRows(t, store.drv) == 0 })
	stopCtx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	_ = cl2.Stop(stopCtx)
	cancel()

	rs := consumeAll(t, c.ListenAddrs(), "orders", true)
	got := countByID(rs)
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("message %s seen %d times", id, got[id])
		}
	}
	if len(rs) != n {
		t.Errorf("read_committed consumer saw %d records, want %d", len(rs), n)
	}
	t.Logf("settles lost: %d rows; reconciled in process %d, after restart %d; transactions %d+%d",
		fault.lost.Load(), ts1.Reconciled(), ts2.Reconciled(), ts1.Committed(), ts2.Committed())
	if ts2.Reconciled() == 0 {
		t.Error("the restarted relay reconciled nothing: the crash case was not exercised")
	}
}
