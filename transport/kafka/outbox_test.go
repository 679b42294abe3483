package kafka

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
)

// relaySettings is what Client.Start hands a sender for one outbox.
func relaySettings(app string, outbox uuid.UUID) mensageria.RelaySettings {
	return mensageria.RelaySettings{App: app, OutboxID: outbox, Lease: mensageria.DefaultLease}
}

func newOutboxSender(t testing.TB, c *kfake.Cluster, id, app string, outbox uuid.UUID, log *slog.Logger) *TransactionalSender {
	t.Helper()
	s, err := NewTransactionalSender(TransactionalConfig{Brokers: c.ListenAddrs(), TransactionalID: id, Topic: "orders", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.UseRelaySettings(relaySettings(app, outbox)); err != nil {
		t.Fatal(err)
	}
	return s
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// Two apps on separate outboxes (the catalog of one cannot see the other)
// are given the same transactional id. Their row ids are the same numbers.
// The second must not answer its rows from the first one's position
// record, which would settle 2,000 rows never produced as delivered: it
// refuses the id, naming both outboxes, produces and reconciles nothing,
// and leaves the first relay unfenced.
func TestTransactionalRefusesAnotherOutboxsRecord(t *testing.T) {
	c := newCluster(t, "orders")
	outboxA, outboxB := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	a := newOutboxSender(t, c, "mensageria-relay", "pedidos", outboxA, nil)
	var rowsA [][]*mensageria.Delivery
	for from := int64(1); from <= 2000; from += 500 {
		batch := deliveries("pedido", from, 500)
		mustSend(t, a, batch)
		rowsA = append(rowsA, batch)
	}

	var logs syncBuffer
	b := newOutboxSender(t, c, "mensageria-relay", "faturas", outboxB, slog.New(slog.NewTextHandler(&logs, nil)))
	rowsB := deliveries("fatura", 1, 2000) // the same row ids, in the other outbox
	for from := 0; from < len(rowsB); from += 500 {
		batch := rowsB[from : from+500]
		errs := b.SendBatch(testCtx(t), batch)
		if len(errs) != len(batch) {
			t.Fatalf("%d errors for %d deliveries: rows would be settled as delivered", len(errs), len(batch))
		}
		for i, err := range errs {
			var fe *ForeignPositionsError
			switch {
			case !errors.As(err, &fe):
				t.Fatalf("row %d: %v, want a *ForeignPositionsError", batch[i].Seq, err)
			case mensageria.IsPermanent(err):
				t.Fatalf("row %d: refused permanently; it must stay in the outbox to be retried", batch[i].Seq)
			case fe.RecordOutbox != outboxA || fe.Outbox != outboxB || fe.RecordApp != "pedidos" || fe.App != "faturas" || fe.TransactionalID != "mensageria-relay":
				t.Fatalf("error names %+v", fe)
			}
			if _, ok := mensageria.RetryAfterOf(err); !ok {
				t.Fatalf("row %d: the relay is not asked to wait: %v", batch[i].Seq, err)
			}
		}
		msg := errs[0].Error()
		for _, want := range []string{outboxA.String(), outboxB.String(), `"mensageria-relay"`, `"pedidos"`, `"faturas"`} {
			if !strings.Contains(msg, want) {
				t.Fatalf("error does not name %s: %s", want, msg)
			}
		}
	}
	if b.Reconciled() != 0 || b.Committed() != 0 {
		t.Fatalf("the refused sender reconciled %d rows and committed %d transactions", b.Reconciled(), b.Committed())
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), outboxA.String()) {
		t.Fatalf("the refusal was not logged as an error naming the other outbox: %s", logs.String())
	}
	// The rightful relay was never fenced by the refused one.
	more := deliveries("pedido", 2001, 10)
	mustSend(t, a, more)
	assertExactlyOnce(t, consumeAll(t, c.ListenAddrs(), "orders", true), append(rowsA, more)...)

	// A sender never told its outbox cannot prove any named record its
	// own: it refuses too.
	blind := newTxSender(t, c, "mensageria-relay")
	if err := mustFail(blind.SendBatch(testCtx(t), deliveries("fatura", 1, 5))); !errors.Is(err, ErrForeignPositions) {
		t.Fatalf("a sender without an outbox read another outbox's record: %v", err)
	}
}

// The same outbox's next relay (a restart, a failover) reads the record as
// its own and reconciles; the record carries the outbox and app it names.
func TestTransactionalRecordNamesItsOutbox(t *testing.T) {
	c := newCluster(t, "orders")
	outbox := uuid.Must(uuid.NewV7())
	a := newOutboxSender(t, c, "relay-app", "pedidos", outbox, nil)
	b1 := deliveries("pedido", 1, 20)
	mustSend(t, a, b1)
	a.Close()

	next := newOutboxSender(t, c, "relay-app", "pedidos", outbox, nil)
	mustSend(t, next, b1) // settle lost with the first relay
	if next.Reconciled() != 20 {
		t.Fatalf("the same outbox's successor reconciled %d rows, want 20", next.Reconciled())
	}
	val, found, err := readPositions(testCtx(t), next.base, DefaultPositionsTopic, "relay-app")
	if err != nil || !found {
		t.Fatalf("record: %v %v", found, err)
	}
	rec, err := recordOwner(val)
	if err != nil || rec.Outbox != outbox || rec.App != "pedidos" || !strings.HasPrefix(string(val), `{"v":3,`) {
		t.Fatalf("record %s names %+v (%v), want version 3 with outbox %s", val, rec, err, outbox)
	}
	assertExactlyOnce(t, consumeAll(t, c.ListenAddrs(), "orders", true), b1)
}

// Upgrading: the records an older version wrote name no outbox. They are
// the outbox's own (nothing else could be known), so the rows they hold
// are still not produced twice; the next transaction rewrites the record
// with the outbox.
func TestTransactionalReadsRecordsOfOlderVersions(t *testing.T) {
	c := newCluster(t, "orders")
	old := newTxSender(t, c, "relay-app") // writes version 2, as before
	b1 := deliveries("pedido", 1, 20)
	mustSend(t, old, b1)
	old.Close()
	val, _, err := readPositions(testCtx(t), old.base, DefaultPositionsTopic, "relay-app")
	if err != nil || !strings.HasPrefix(string(val), `{"v":2,`) {
		t.Fatalf("the sender without an outbox wrote %s (%v), want a version 2 record", val, err)
	}

	outbox := uuid.Must(uuid.NewV7())
	var logs syncBuffer
	up := newOutboxSender(t, c, "relay-app", "pedidos", outbox, slog.New(slog.NewTextHandler(&logs, nil)))
	b2 := deliveries("pedido", 21, 5)
	mustSend(t, up, append(append([]*mensageria.Delivery{}, b1...), b2...))
	if up.Reconciled() != 20 {
		t.Fatalf("the upgraded relay reconciled %d of the older record's rows, want 20", up.Reconciled())
	}
	if !strings.Contains(logs.String(), "names no outbox") {
		t.Fatalf("reading an older record was not said: %s", logs.String())
	}
	val, _, err = readPositions(testCtx(t), up.base, DefaultPositionsTopic, "relay-app")
	if rec, _ := recordOwner(val); err != nil || rec.Outbox != outbox {
		t.Fatalf("record after the upgrade %s (%v) does not name the outbox", val, err)
	}
	assertExactlyOnce(t, consumeAll(t, c.ListenAddrs(), "orders", true), b1, b2)
}

// Retain follows the relay's lease unless the config set it; a set one
// must exceed the lease; a sender serves one outbox.
func TestTransactionalRelaySettings(t *testing.T) {
	newSender := func(retain time.Duration) *TransactionalSender {
		s, err := NewTransactionalSender(TransactionalConfig{Brokers: []string{"127.0.0.1:1"}, TransactionalID: "relay-app", Topic: "orders", Retain: retain, Lanes: 3})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	outbox := uuid.Must(uuid.NewV7())
	for _, c := range []struct {
		lease, retain, want time.Duration
	}{
		{0, 0, 5 * time.Minute}, // the default lease
		{10 * time.Second, 0, 5 * time.Minute},
		{time.Minute, 0, 10 * time.Minute},
		{2 * time.Minute, 0, 20 * time.Minute},
		{time.Minute, 90 * time.Second, 90 * time.Second}, // the config's own
	} {
		s := newSender(c.retain)
		if s.retain != 5*time.Minute && c.retain == 0 {
			t.Errorf("before the settings, Retain is %s, want 5m", s.retain)
		}
		if err := s.UseRelaySettings(mensageria.RelaySettings{App: "shop", OutboxID: outbox, Lease: c.lease}); err != nil {
			t.Fatal(err)
		}
		if s.retain != c.want {
			t.Errorf("lease %s, Retain %s: retained for %s, want %s", c.lease, c.retain, s.retain, c.want)
		}
	}
	if err := newSender(time.Minute).UseRelaySettings(mensageria.RelaySettings{OutboxID: outbox, Lease: time.Minute}); !errors.Is(err, mensageria.ErrConfig) || !strings.Contains(err.Error(), "Retain") {
		t.Errorf("a Retain equal to the lease: %v, want a config error on Retain", err)
	}
	s := newSender(0)
	if err := s.UseRelaySettings(mensageria.RelaySettings{App: "shop", OutboxID: outbox}); err != nil {
		t.Fatal(err)
	}
	if err := s.UseRelaySettings(mensageria.RelaySettings{App: "shop", OutboxID: outbox}); err != nil {
		t.Errorf("the same settings twice: %v", err)
	}
	if err := s.UseRelaySettings(mensageria.RelaySettings{App: "other", OutboxID: uuid.Must(uuid.NewV7())}); !errors.Is(err, mensageria.ErrConfig) {
		t.Errorf("a second outbox: %v, want a config error", err)
	}

	var names []string
	for _, r := range s.OwnedResources() {
		if r.Kind != driver.ResourceKafkaTransactionalID {
			t.Errorf("resource %+v is not a transactional id", r)
		}
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ","); got != "relay-app,relay-app.1,relay-app.2" {
		t.Errorf("owned ids %s, want every lane's", got)
	}
}
