package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
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
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return ts1.Reconciled() >= 40 }, "in-process reconciliation")
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
	mensageriatest.Eventually(t, 30*time.Second, func() bool { return pendingRows(t, store.drv) == 0 }, "outbox drained")
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

// foreignRetries counts the deliveries a relay retried because the
// transactional id's record was another outbox's.
type foreignRetries struct{ n, other atomic.Int64 }

func (h *foreignRetries) OnDelivery(ev mensageria.DeliveryEvent) {
	switch {
	case ev.Outcome == mensageria.OutcomeRetry && errors.Is(ev.Err, ErrForeignPositions):
		h.n.Add(1)
	case ev.Outcome != mensageria.OutcomeDelivered:
		h.other.Add(1)
	}
}

// Two apps on separate outboxes (two schemas: neither catalog sees the
// other's) are configured with the same transactional id, and each
// enqueues 2,000 rows: the same row ids. The second relay used to find the
// first one's position record, answer its own rows from it and settle all
// of them as delivered without producing one. Now it refuses the id,
// naming both outboxes: not a row of it is settled, every one stays in its
// outbox, and Kafka holds the first app's messages once each.
func TestRelayTwoOutboxesOneTransactionalID(t *testing.T) {
	testdb.Long(t, "two relays of 2,000 rows")
	c := newCluster(t, "orders")
	run := func(store *pgStore, app, typ string, hook mensageria.Hook) (*mensageria.Client, []string) {
		ts := newTxSender(t, c, "mensageria-relay")
		cl, err := mensageria.New(store.drv, &mensageria.Config{
			App: app, Registry: mensageria.NewRegistry().MustRegister(typ, ts),
			BatchSize: 500, Lease: 5 * time.Second, PollInterval: 20 * time.Millisecond,
			Hooks: []mensageria.Hook{hook},
		})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := 0; i < 2000; i += 500 {
			batch := make([]mensageria.Message, 500)
			for k := range batch {
				batch[k] = mensageria.Message{Type: typ, Key: fmt.Sprintf("%s-%d", typ, i+k), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i+k))}
			}
			got, err := cl.Enqueue(testCtx(t), batch...)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range got {
				ids = append(ids, id.String())
			}
		}
		if err := cl.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = cl.Stop(ctx)
		})
		return cl, ids
	}

	storeA, storeB := newPGStore(t), newPGStore(t)
	var hookA, hookB foreignRetries
	clientA, idsA := run(storeA, "pedidos", "pedido", &hookA)
	mensageriatest.Eventually(t, 60*time.Second, func() bool { return pendingRows(t, storeA.drv) == 0 }, "the first app's outbox drained")

	clientB, idsB := run(storeB, "faturas", "fatura", &hookB)
	mensageriatest.Eventually(t, 60*time.Second, func() bool {
		return hookB.n.Load() >= 2000 || pendingRows(t, storeB.drv) == 0
	}, "every row of the second app attempted")
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = clientB.Stop(stopCtx)
	cancel()

	produced := countByID(consumeAll(t, c.ListenAddrs(), "orders", true))
	lost := 0
	for _, id := range idsB {
		if produced[id] == 0 {
			lost++
		}
	}
	if left := pendingRows(t, storeB.drv); left+int64(2000-lost) != 2000 {
		t.Fatalf("the second app: %d rows left in its outbox and %d produced; %d rows were settled as delivered without being produced",
			left, 2000-lost, 2000-left-int64(2000-lost))
	}
	if hookB.n.Load() < 2000 || hookB.other.Load() != 0 {
		t.Fatalf("the second app's relay retried %d rows for the foreign record (want all 2,000), and gave %d other outcomes", hookB.n.Load(), hookB.other.Load())
	}
	for _, id := range idsA {
		if produced[id] != 1 {
			t.Errorf("the first app's message %s produced %d times", id, produced[id])
		}
	}
	if len(produced) != 2000 {
		t.Errorf("%d messages in Kafka, want the first app's 2,000", len(produced))
	}

	// The refusal names both outboxes and the id, in each row's last
	// error, so an operator sees it in dead list and status.
	regA, err := clientA.Register(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	regB, err := clientB.Register(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := storeB.drv.ListMessages(testCtx(t), driver.ListFilter{State: driver.StatePending, Limit: 5})
	if err != nil || len(rows) == 0 {
		t.Fatalf("listing the second outbox: %d rows, %v", len(rows), err)
	}
	for _, want := range []string{uuid.UUID(regA.OutboxID).String(), uuid.UUID(regB.OutboxID).String(), `"mensageria-relay"`, `"pedidos"`, `"faturas"`} {
		if !strings.Contains(rows[0].LastError, want) {
			t.Fatalf("the row's last error does not name %s: %s", want, rows[0].LastError)
		}
	}
}

// Two apps on one database with the same transactional id: the catalog
// refuses the second at Start, naming both apps and the id; nothing of it
// runs.
func TestRelaySameTransactionalIDOnOneDatabase(t *testing.T) {
	c := newCluster(t, "orders")
	store := newPGStore(t)
	client := func(app, typ string) *mensageria.Client {
		cl, err := mensageria.New(store.drv, &mensageria.Config{
			App: app, Registry: mensageria.NewRegistry().MustRegister(typ, newTxSender(t, c, "mensageria-relay")),
			PollInterval: 20 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	first := client("pedidos", "pedido")
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = first.Stop(context.Background()) })
	second := client("faturas", "fatura")
	err := second.Start(context.Background())
	var oe *mensageria.OwnerConflictError
	if !errors.As(err, &oe) || !errors.Is(err, mensageria.ErrOwnerConflict) {
		t.Fatalf("the second app with the same id started: %v", err)
	}
	for _, want := range []string{`"pedidos"`, `"faturas"`, `Kafka transactional id "mensageria-relay`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %s: %v", want, err)
		}
	}
	if len(oe.Conflicts) != 2 || oe.Conflicts[0].Kind != driver.ResourceKafkaTransactionalID || oe.Conflicts[0].App != "pedidos" {
		t.Errorf("conflicts %+v, want both lanes' ids, owned by pedidos", oe.Conflicts)
	}
}
