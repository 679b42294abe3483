package kafka

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/xadm/mensageria"
)

func TestSenderRecordsCarryKeyAndIdentity(t *testing.T) {
	c := newCluster(t, "orders")
	s, err := NewSender(SenderConfig{Brokers: c.ListenAddrs(), Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ds := deliveries("order", 1, 40)
	ds[0].Headers = map[string]string{mensageria.HeaderRequestID: "req-1"}
	enqueued := time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.FixedZone("BRT", -3*3600))
	for i, d := range ds {
		d.CreatedAt = enqueued.Add(time.Duration(i) * time.Millisecond)
	}
	if errs := s.SendBatch(testCtx(t), ds); errs != nil {
		t.Fatal(errors.Join(errs...))
	}
	if err := s.Send(testCtx(t), ds[1]); err != nil { // a relay redelivery
		t.Fatal(err)
	}
	rs := consumeAll(t, c.ListenAddrs(), "orders", true)
	if len(rs) != 41 {
		t.Fatalf("%d records, want 41: the idempotent Sender is at-least-once across relay redeliveries", len(rs))
	}
	partOf := map[string]int32{}
	byID := map[string]*mensageria.Delivery{}
	for _, d := range ds {
		byID[d.ID.String()] = d
	}
	for _, r := range rs {
		d := byID[header(r, HeaderMessageID)]
		if d == nil {
			t.Fatalf("record without a known %s header", HeaderMessageID)
		}
		if string(r.Key) != d.Key || header(r, HeaderType) != "order" || string(r.Value) != string(d.Payload) {
			t.Fatalf("record %+v does not carry delivery %+v", r, d)
		}
		if p, ok := partOf[d.Key]; ok && p != r.Partition {
			t.Fatalf("key %s in partitions %d and %d", d.Key, p, r.Partition)
		}
		partOf[d.Key] = r.Partition
		// What a receiver reads back is the delivery, enqueue time
		// included: an Inbox with a dedup window needs it.
		got, err := DeliveryOf(r)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != d.ID || got.Type != d.Type || got.Key != d.Key || string(got.Payload) != string(d.Payload) ||
			!got.CreatedAt.Equal(d.CreatedAt) || !maps.Equal(got.Headers, d.Headers) || got.Seq != r.Offset {
			t.Fatalf("DeliveryOf = %+v, want %+v", got, d)
		}
	}
	found := false
	for _, r := range rs {
		found = found || header(r, mensageria.HeaderRequestID) == "req-1"
	}
	if !found {
		t.Fatal("message headers were not carried")
	}
}

func TestSenderRefusesNonIdempotentClient(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.DisableIdempotentWrite())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := NewSender(SenderConfig{Client: cl, Topic: "t"}); !errors.Is(err, mensageria.ErrConfig) {
		t.Fatalf("NewSender with idempotence disabled: %v, want ErrConfig", err)
	}
	if _, err := NewSender(SenderConfig{Brokers: []string{"x:1"}, Topic: "t", Opts: []kgo.Opt{kgo.DisableIdempotentWrite()}}); !errors.Is(err, mensageria.ErrConfig) {
		t.Fatalf("NewSender with idempotence disabled in Opts: %v, want ErrConfig", err)
	}
	if _, err := NewSender(SenderConfig{Brokers: []string{"x:1"}}); !errors.Is(err, mensageria.ErrConfig) {
		t.Fatalf("NewSender without a topic: %v, want ErrConfig", err)
	}
}

// A record the brokers refuse for good is parked (Permanent); the others
// of the batch are delivered.
func TestSenderPermanentRefusal(t *testing.T) {
	c := newCluster(t, "orders")
	s, err := NewSender(SenderConfig{Brokers: c.ListenAddrs(), Topic: "orders", Opts: []kgo.Opt{kgo.RecordRetries(2)}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Partitions: []int32{0}, Err: kerr.MessageTooLarge, Count: -1})
	defer h.Remove()
	ds := deliveries("order", 1, 30)
	errs := s.SendBatch(testCtx(t), ds)
	if errs == nil {
		t.Fatal("no error with a partition refusing every record")
	}
	var bad, good int
	for _, err := range errs {
		switch {
		case err == nil:
			good++
		case mensageria.IsPermanent(err):
			bad++
		default:
			t.Fatalf("refusal not classified permanent: %v", err)
		}
	}
	if bad == 0 || good == 0 {
		t.Fatalf("permanent %d, delivered %d", bad, good)
	}
}

// The destination a dead letter names, for both producers.
func TestDestination(t *testing.T) {
	perDelivery := func(*mensageria.Delivery) string { return "x" }
	for _, c := range []struct {
		topic string
		fn    func(*mensageria.Delivery) string
		want  string
	}{
		{"orders", nil, "kafka topic orders"},
		{"", perDelivery, "kafka (topic per delivery)"},
		{"orders", perDelivery, "kafka (topic per delivery)"},
	} {
		s, err := NewSender(SenderConfig{Brokers: []string{"127.0.0.1:1"}, Topic: c.topic, TopicFor: c.fn})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		ts, err := NewTransactionalSender(TransactionalConfig{Brokers: []string{"127.0.0.1:1"}, TransactionalID: "id", Topic: c.topic, TopicFor: c.fn})
		if err != nil {
			t.Fatal(err)
		}
		ts.Close()
		if s.Destination() != c.want || ts.Destination() != c.want {
			t.Errorf("topic %q: Destination() = %q and %q, want %q", c.topic, s.Destination(), ts.Destination(), c.want)
		}
	}
}

// Two batches in flight each produce on a client of their own: the
// cluster holds the first batch's produce request until the second
// batch's has arrived, which one client (one request in flight per broker)
// would never send. Both batches are delivered.
func TestSenderBatchesInFlightDoNotWaitForEachOther(t *testing.T) {
	c := newCluster(t, "orders")
	s, err := NewSender(SenderConfig{Brokers: c.ListenAddrs(), Topic: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Metadata and producer ids first, outside the hold.
	if errs := s.SendBatch(testCtx(t), deliveries("order", 1, 2)); errs != nil {
		t.Fatal(errs)
	}
	second := make(chan struct{})
	var produces atomic.Int64
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		switch produces.Add(1) {
		case 1:
			c.SleepControl(func() { <-second })
		case 2:
			close(second)
		}
		return nil, nil, false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([][]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.SendBatch(ctx, deliveries("order", int64(100*(i+1)), 10))
		}()
	}
	wg.Wait()
	for i, e := range errs {
		if e != nil {
			t.Fatalf("batch %d: %v", i, e)
		}
	}
	if n := produces.Load(); n < 2 {
		t.Fatalf("%d produce requests", n)
	}
	if _, err := NewSender(SenderConfig{Brokers: c.ListenAddrs(), Topic: "orders", Producers: 17}); !errors.Is(err, mensageria.ErrConfig) {
		t.Fatalf("Producers 17: %v", err)
	}
}
