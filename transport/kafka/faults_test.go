package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/mensageriatest"
	"github.com/xadm/mensageria/transport/transporttest"
)

// Beyond the suite's table (TestConformance, Classify): a broker's
// answer names the topic and partition, and a fence is not the route's
// failure nor the message's.
func TestBrokerErrorNamesTopicAndPartition(t *testing.T) {
	for _, c := range brokerErrors {
		got := classify("orders", 2, c.Err)
		if _, ok := c.Err.(*kerr.Error); ok && !strings.Contains(got.Error(), `topic "orders" partition 2`) {
			t.Errorf("%v: %q does not name the topic and partition", c.Err, got)
		}
	}
	// A fence is not an error of the route: the sender stops, and the
	// relay waits.
	if got := classify("orders", 0, kerr.ProducerFenced); mensageria.IsUnavailable(got) || mensageria.IsPermanent(got) {
		t.Errorf("PRODUCER_FENCED classified %v", got)
	}
	if isFenced(kerr.TransactionalIDAuthorizationFailed) {
		t.Error("an authorization failure on the transactional id is taken for a fence")
	}
}

// outcomes counts a relay's delivery events, and keeps the errors of the
// failed ones: postponed (the route's failure, its attempt not counted)
// and retried (counted).
type outcomes struct {
	mu      sync.Mutex
	counts  map[mensageria.Outcome]int
	retried []error
	// postponed is closed at the first delivery whose failure the route
	// breaker took as the route's. A batch that was on its way while
	// another batch was answered is counted against its own rows
	// instead (the destination was answering), so the first failure of an
	// outage may be a counted retry; a test waits for this one.
	postponed chan struct{}
	once      sync.Once
}

func newOutcomes() *outcomes {
	return &outcomes{counts: map[mensageria.Outcome]int{}, postponed: make(chan struct{})}
}

func (o *outcomes) OnDelivery(ev mensageria.DeliveryEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.counts[ev.Outcome]++
	if ev.Outcome == mensageria.OutcomeRetry || ev.Outcome == mensageria.OutcomePostponed {
		o.retried = append(o.retried, ev.Err)
	}
	if ev.Outcome == mensageria.OutcomePostponed {
		o.once.Do(func() { close(o.postponed) })
	}
}

// assertRoute checks that every failed delivery was the route's
// (Unavailable), that most were postponed, their attempts not counted
// (the route breaker's doing), and that none went dead, was fenced,
// expired or was left unsettled.
func (o *outcomes) assertRoute(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.retried) == 0 {
		t.Fatal("no delivery was retried: the fault did not happen")
	}
	for _, err := range o.retried {
		if !mensageria.IsUnavailable(err) {
			t.Fatalf("a failed delivery not marked as the route's failure: %v", err)
		}
	}
	if o.counts[mensageria.OutcomePostponed] == 0 {
		t.Fatalf("no failure was the route's, its attempt left uncounted: %v", o.counts)
	}
	for _, k := range []mensageria.Outcome{mensageria.OutcomeDead, mensageria.OutcomeFenced, mensageria.OutcomeExpired, mensageria.OutcomeUnsettled} {
		if n := o.counts[k]; n > 0 {
			t.Fatalf("%d deliveries %s", n, k)
		}
	}
}

// faultRelay is the real relay on PostgreSQL into Kafka with one sender
// of a mode, its logs and outcomes captured.
type faultRelay struct {
	store  *pgStore
	client *mensageria.Client
	log    *transporttest.LogRecords // the sender's
	relay  *transporttest.LogRecords // the relay's
	out    *outcomes
	ids    []string
}

// testSender builds the sender of mode ("idempotent" or "transactional")
// for topic on brokers, with short waits.
func testSender(t *testing.T, mode string, brokers []string, topic string, log *slog.Logger) mensageria.BatchSender {
	t.Helper()
	switch mode {
	case "idempotent":
		s, err := NewSender(SenderConfig{Brokers: brokers, Topic: topic, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		s.checkTimeout, s.diagnoseAfter = 500*time.Millisecond, 200*time.Millisecond
		t.Cleanup(s.Close)
		return s
	case "transactional":
		s, err := NewTransactionalSender(TransactionalConfig{Brokers: brokers, Topic: topic, TransactionalID: "relay-" + topic,
			PositionsTopic: "positions", Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		s.checkTimeout, s.diagnoseAfter = 500*time.Millisecond, 200*time.Millisecond
		t.Cleanup(s.Close)
		return s
	}
	t.Fatalf("mode %q", mode)
	return nil
}

func newFaultRelay(t *testing.T, mode string, brokers []string, lease time.Duration, n int) *faultRelay {
	t.Helper()
	r := &faultRelay{store: newPGStore(t), log: &transporttest.LogRecords{}, relay: &transporttest.LogRecords{}, out: newOutcomes()}
	s := testSender(t, mode, brokers, "orders", slog.New(r.log))
	cl, err := mensageria.New(r.store.drv, &mensageria.Config{
		App: "shop", Registry: mensageria.NewRegistry().MustRegister("order", s),
		Lease: lease, BatchSize: 20, PollInterval: 20 * time.Millisecond,
		// Few attempts: an outage must spend none of them (the route
		// pauses instead), or the messages would go dead.
		MaxAttempts: 3, BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		RoutePause: 100 * time.Millisecond, RoutePauseMax: time.Second,
		Hooks: []mensageria.Hook{r.out}, Logger: slog.New(r.relay),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.client = cl
	for i := 0; i < n; i += 100 {
		batch := make([]mensageria.Message, min(100, n-i))
		for k := range batch {
			batch[k] = mensageria.Message{Type: "order", Key: fmt.Sprintf("o-%d", (i+k)%13), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i+k))}
		}
		got, err := cl.Enqueue(testCtx(t), batch...)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range got {
			r.ids = append(r.ids, id.String())
		}
	}
	return r
}

func (r *faultRelay) start(t *testing.T) error {
	t.Helper()
	err := r.client.Start(context.Background())
	if err == nil {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = r.client.Stop(ctx)
		})
	}
	return err
}

// waitPostponed waits for the relay's first delivery postponed as the
// route's failure.
func (r *faultRelay) waitPostponed(t *testing.T) {
	t.Helper()
	select {
	case <-r.out.postponed:
	case <-time.After(60 * time.Second):
		t.Fatal("no delivery was postponed within a minute")
	}
}

// assertAllDelivered waits for the outbox to drain, then checks that
// nothing went dead and that Kafka holds every message.
func (r *faultRelay) assertAllDelivered(t *testing.T, brokers []string) {
	t.Helper()
	mensageriatest.Eventually(t, 90*time.Second, func() bool { return pendingRows(t, r.store.drv) == 0 }, "the outbox drained")
	st, err := r.store.drv.Stats(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Dead > 0 {
			t.Fatalf("%d dead letters of %s", s.Dead, s.Type)
		}
	}
	if dead := r.relay.Lines(slog.LevelWarn, "dead"); len(dead) > 0 {
		t.Fatalf("the relay parked messages: %q", dead)
	}
	got := countByID(consumeAll(t, brokers, "orders", true))
	for _, id := range r.ids {
		if got[id] == 0 {
			t.Fatalf("message %s is not in Kafka", id)
		}
	}
}

func eachMode(t *testing.T, run func(t *testing.T, mode string)) {
	for _, mode := range []string{"idempotent", "transactional"} {
		t.Run(mode, func(t *testing.T) { run(t, mode) })
	}
}

// A client that creates topics starts without the topic (the suite's
// StartRefused holds the others to refusing Start), and the topic exists
// after.
func TestStartCreatesTheTopic(t *testing.T) {
	c := newCluster(t) // no topic; the brokers create topics
	s, err := NewSender(SenderConfig{Brokers: c.ListenAddrs(), Topic: "created", Opts: []kgo.Opt{kgo.AllowAutoTopicCreation()}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.UseRelaySettings(mensageria.RelaySettings{}); err != nil {
		t.Fatalf("a client that creates topics refused at start: %v", err)
	}
	if err := s.Check(testCtx(t)); err != nil {
		t.Fatalf("the topic was not created: %v", err)
	}
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// Every connection to the cluster is dropped for a while in the middle of
// a backlog: each batch still ends by its deadline, so the relay settles
// within its lease (10s, leaving the settle a second on a loaded machine). No row is reported fenced or expired (one relay runs;
// nothing else holds its rows), the transactional sender is not fenced,
// and every row is delivered, once each for read_committed consumers.
func TestBrokerOutageMidBacklogFencesNothing(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		c := newCluster(t, "orders")
		r := newFaultRelay(t, mode, c.ListenAddrs(), 10*time.Second, 400)
		// The cluster answers the first three produce requests, then
		// drops every connection until the test lifts it.
		var (
			down     atomic.Bool
			produced atomic.Int64
			failing  = make(chan struct{})
		)
		c.Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if req.Key() == kmsg.Produce.Int16() && produced.Add(1) == 4 {
				down.Store(true)
				close(failing)
			}
			if down.Load() {
				return nil, errors.New("injected: broker down"), true
			}
			return nil, nil, false
		})
		if err := r.start(t); err != nil {
			t.Fatal(err)
		}
		select {
		case <-failing:
		case <-time.After(60 * time.Second):
			t.Fatal("the relay did not produce")
		}
		r.waitPostponed(t)
		down.Store(false)
		r.assertAllDelivered(t, c.ListenAddrs())
		r.out.assertRoute(t)
		if lines := r.relay.Lines(slog.LevelWarn, "another relay"); len(lines) > 0 {
			t.Fatalf("the relay reported rows owned by another relay: %q", lines)
		}
		if fenced := r.log.Lines(slog.LevelWarn, "fenced"); len(fenced) > 0 {
			t.Fatalf("the sender took the outage for a fence: %q", fenced)
		}
		if mode == "transactional" {
			rs := consumeAll(t, c.ListenAddrs(), "orders", true)
			got := countByID(rs)
			for _, id := range r.ids {
				if got[id] != 1 {
					t.Fatalf("message %s seen %d times by a read_committed consumer", id, got[id])
				}
			}
		}
	})
}
