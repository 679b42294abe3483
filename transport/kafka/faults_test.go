package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/xadm/mensageria"
)

// The table of docs/config.md ("Broker errors"), answer by answer.
func TestBrokerErrorClassification(t *testing.T) {
	const (
		route   = "route"
		message = "message"
		retry   = "retry"
	)
	for _, c := range []struct {
		err  error
		want string
	}{
		{kerr.UnknownTopicOrPartition, route},
		{kerr.UnknownTopicID, route},
		{kerr.TopicAuthorizationFailed, route},
		{kerr.ClusterAuthorizationFailed, route},
		{kerr.TransactionalIDAuthorizationFailed, route},
		{kerr.SaslAuthenticationFailed, route},
		{kerr.NotLeaderForPartition, route},
		{kerr.LeaderNotAvailable, route},
		{kerr.RequestTimedOut, route},
		{kerr.NotEnoughReplicas, route},
		{kerr.NotEnoughReplicasAfterAppend, route},
		{kerr.BrokerNotAvailable, route},
		{kerr.NetworkException, route},
		{kerr.KafkaStorageError, route},
		{kerr.CoordinatorNotAvailable, route},
		{kerr.NotCoordinator, route},
		{kerr.ConcurrentTransactions, route},
		{kerr.ThrottlingQuotaExceeded, route},
		{context.DeadlineExceeded, route},
		{kgo.ErrRecordTimeout, route},
		{kgo.ErrRecordRetries, route},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, route},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), route},
		{io.EOF, route},
		{&NoAckError{Topic: "orders", Waited: time.Second}, route},
		{&UnreachableError{Broker: "b:9092", Err: syscall.ECONNREFUSED}, route},
		{kerr.MessageTooLarge, message},
		{kerr.RecordListTooLarge, message},
		{kerr.InvalidRecord, message},
		{kerr.CorruptMessage, message},
		{kerr.InvalidTimestamp, message},
		{kerr.UnsupportedForMessageFormat, message},
		{kerr.InvalidTopicException, message},
		{kerr.UnknownServerError, retry},
		{kerr.OutOfOrderSequenceNumber, retry},
		{errors.New("something else"), retry},
	} {
		got := classify("orders", 2, c.err)
		kind := retry
		switch {
		case mensageria.IsPermanent(got) && mensageria.IsUnavailable(got):
			t.Errorf("%v: both Permanent and Unavailable", c.err)
		case mensageria.IsPermanent(got):
			kind = message
		case mensageria.IsUnavailable(got):
			kind = route
		}
		if kind != c.want {
			t.Errorf("%v: classified %s, want %s", c.err, kind, c.want)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%v: the classified error %v does not wrap it", c.err, got)
		}
		if _, ok := c.err.(*kerr.Error); ok && !strings.Contains(got.Error(), `topic "orders" partition 2`) {
			t.Errorf("%v: %q does not name the topic and partition", c.err, got)
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

// logRecords is a slog handler that keeps every record, for counting the
// lines a test expects.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

// lines returns the records at level or above whose message contains
// part, each as "message attr=value ...".
func (h *logRecords) lines(level slog.Level, part string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.recs {
		if r.Level < level || !strings.Contains(r.Message, part) {
			continue
		}
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		out = append(out, b.String())
	}
	return out
}

// atLeast returns the records at level or above.
func (h *logRecords) atLeast(level slog.Level) []string { return h.lines(level, "") }

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

func (o *outcomes) count(k mensageria.Outcome) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[k]
}

// assertRoute checks that every failed delivery was about the route, and
// that the errors say why: each of them all of every (the fault's name,
// when it answers at once), and one at least all of some (when the
// cluster could not be asked, the failures as it came back say what they
// found then). Most of them were postponed, their attempts not counted
// (the route breaker's doing); none went dead, was fenced, expired or
// was left unsettled.
func (o *outcomes) assertRoute(t *testing.T, every, some []string) {
	t.Helper()
	o.assertRetries(t, o.retriesSoFar(), every, some)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.counts[mensageria.OutcomePostponed] == 0 {
		t.Fatalf("no failure was the route's, its attempt left uncounted: %v", o.counts)
	}
	for _, k := range []mensageria.Outcome{mensageria.OutcomeDead, mensageria.OutcomeFenced, mensageria.OutcomeExpired, mensageria.OutcomeUnsettled} {
		if n := o.counts[k]; n > 0 {
			t.Fatalf("%d deliveries %s", n, k)
		}
	}
}

// retriesSoFar returns the errors of the retries up to now.
func (o *outcomes) retriesSoFar() []error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.retried)
}

// assertRetries is assertRoute's check of the errors of retried.
func (o *outcomes) assertRetries(t *testing.T, retried []error, every, some []string) {
	t.Helper()
	if len(retried) == 0 {
		t.Fatal("no delivery was retried: the fault did not happen")
	}
	says := func(err error, want []string) bool {
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				return false
			}
		}
		return true
	}
	found := some == nil
	for _, err := range retried {
		if !mensageria.IsUnavailable(err) {
			t.Fatalf("a failed delivery not marked as the route's failure: %v", err)
		}
		if !says(err, every) {
			t.Fatalf("a retry's error does not say all of %q: %v", every, err)
		}
		found = found || says(err, some)
	}
	if !found {
		t.Fatalf("no retry's error says all of %q: %v", some, retried)
	}
}

// faultRelay is the real relay on PostgreSQL into Kafka with one sender
// of a mode, its logs and outcomes captured.
type faultRelay struct {
	store  *pgStore
	client *mensageria.Client
	log    *logRecords // the sender's
	relay  *logRecords // the relay's
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
	r := &faultRelay{store: newPGStore(t), log: &logRecords{}, relay: &logRecords{}, out: newOutcomes()}
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

// waitRetries waits for n failed deliveries and returns their errors.
func (r *faultRelay) waitRetries(t *testing.T, n int) []error {
	t.Helper()
	waitFor(t, 60*time.Second, fmt.Sprintf("%d failed deliveries", n), func() bool { return len(r.out.retriesSoFar()) >= n })
	return r.out.retriesSoFar()
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
	waitFor(t, 90*time.Second, "the outbox drained", func() bool { return pendingRows(t, r.store.drv) == 0 })
	st, err := r.store.drv.Stats(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if s.Dead > 0 {
			t.Fatalf("%d dead letters of %s", s.Dead, s.Type)
		}
	}
	if dead := r.relay.lines(slog.LevelWarn, "dead"); len(dead) > 0 {
		t.Fatalf("the relay parked messages: %q", dead)
	}
	got := countByID(consumeAll(t, brokers, "orders", true))
	for _, id := range r.ids {
		if got[id] == 0 {
			t.Fatalf("message %s is not in Kafka", id)
		}
	}
}

// assertOneOutage checks that the outage was logged once when it started
// (the relay pausing the route, its line saying each of want) and once
// when it ended (the route resumed), and that the sender logged nothing
// at warning level but the start's check when the cluster could not be
// asked (startChecks of them: 0 or 1).
func (r *faultRelay) assertOneOutage(t *testing.T, startChecks int, want ...string) {
	t.Helper()
	down := r.relay.lines(slog.LevelWarn, "route paused:")
	if len(down) != 1 {
		t.Fatalf("the outage's start logged %d times, want once: %q", len(down), down)
	}
	for _, w := range want {
		if !strings.Contains(down[0], w) {
			t.Fatalf("the outage's line does not say %q: %s", w, down[0])
		}
	}
	if up := r.relay.lines(slog.LevelInfo, "route resumed"); len(up) != 1 {
		t.Fatalf("the outage's end logged %d times, want once: %q", len(up), up)
	}
	for _, bad := range []string{"lease expired", "another relay", "dead"} {
		if lines := r.relay.lines(slog.LevelWarn, bad); len(lines) > 0 {
			t.Fatalf("the relay logged %q: %q", bad, lines)
		}
	}
	warns := r.log.atLeast(slog.LevelWarn)
	checks := r.log.lines(slog.LevelWarn, "could not be checked at start")
	if len(checks) != startChecks || len(warns) != startChecks {
		t.Fatalf("the sender logged %q at warning level or above, want %d start check lines", warns, startChecks)
	}
}

func eachMode(t *testing.T, run func(t *testing.T, mode string)) {
	for _, mode := range []string{"idempotent", "transactional"} {
		t.Run(mode, func(t *testing.T) { run(t, mode) })
	}
}

// A topic that does not exist, with the client not creating topics, and
// one the client may not use, fail Start with an error naming the topic
// and Kafka's answer; nothing is claimed. A client that creates topics
// starts, and the topic exists after.
func TestStartChecksTheTopic(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		c := newCluster(t, "orders")
		c.Fault(kfake.Fault{Topic: "orders", Err: kerr.UnknownTopicOrPartition, Count: -1})
		r := newFaultRelay(t, mode, c.ListenAddrs(), 5*time.Second, 30)
		err := r.start(t)
		var te *TopicError
		if !errors.As(err, &te) || te.Topic != "orders" || !errors.Is(err, kerr.UnknownTopicOrPartition) {
			t.Fatalf("Start with the topic missing: %v", err)
		}
		for _, w := range []string{`topic "orders"`, "UNKNOWN_TOPIC_OR_PARTITION", "create it"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("Start's error does not say %q: %v", w, err)
			}
		}
		if n := pendingRows(t, r.store.drv); n != 30 || r.out.count(mensageria.OutcomeRetry)+r.out.count(mensageria.OutcomeDelivered) != 0 {
			t.Fatalf("after a failed Start: %d rows pending, want 30 untouched", n)
		}

		c2 := newCluster(t, "orders")
		c2.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: "orders", Err: kerr.TopicAuthorizationFailed, Count: -1})
		r2 := newFaultRelay(t, mode, c2.ListenAddrs(), 5*time.Second, 1)
		err = r2.start(t)
		if !errors.Is(err, kerr.TopicAuthorizationFailed) || !strings.Contains(err.Error(), `topic "orders"`) || !strings.Contains(err.Error(), "grant it WRITE") {
			t.Fatalf("Start with the topic refused: %v", err)
		}
	})

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

// The cluster is down when the relay starts: Start goes on, each batch is
// answered, by its deadline, as the route's failure naming the refused
// connection, and the outage is logged once. The cluster comes up: every
// row is delivered, none dead, and the end of the outage is logged once.
func TestBrokerDownAtStartAndBack(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		port := freePort(t)
		brokers := []string{fmt.Sprintf("127.0.0.1:%d", port)}
		r := newFaultRelay(t, mode, brokers, time.Second, 60)
		if err := r.start(t); err != nil {
			t.Fatalf("Start with the cluster down: %v", err)
		}
		r.waitPostponed(t)
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(3, "orders"), kfake.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		r.assertAllDelivered(t, brokers)
		r.out.assertRoute(t, nil, []string{"connection refused", brokers[0]})
		r.assertOneOutage(t, 1, brokers[0])
	})
}

// The topic goes missing while the relay runs (deleted: every request
// about it answers UNKNOWN_TOPIC_OR_PARTITION). Batches are answered as
// the route's failure naming the topic and the error, well before their
// deadline, and the outage is logged once; when the topic is back every
// row is delivered, none dead.
func TestTopicMissingWhileRelaying(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		c := newCluster(t, "orders")
		r := newFaultRelay(t, mode, c.ListenAddrs(), 30*time.Second, 60)
		if err := r.start(t); err != nil {
			t.Fatal(err)
		}
		h := c.Fault(kfake.Fault{Topic: "orders", Err: kerr.UnknownTopicOrPartition, Count: -1})
		during := r.waitRetries(t, 25)
		h.Remove()
		r.assertAllDelivered(t, c.ListenAddrs())
		// Batches in flight as the topic comes back may find it there.
		r.out.assertRetries(t, during, []string{`topic "orders"`, "UNKNOWN_TOPIC_OR_PARTITION", "create it"}, nil)
		r.out.assertRoute(t, nil, nil)
		r.assertOneOutage(t, 0, "UNKNOWN_TOPIC_OR_PARTITION")
		r.assertNoLongWait(t)
	})
}

// The client loses its right to write the topic while the relay runs
// (TOPIC_AUTHORIZATION_FAILED on every produce): the route's failure,
// naming the topic and what to grant, logged once; when the right is back
// every row is delivered, none dead.
func TestTopicAuthorizationFailureWhileRelaying(t *testing.T) {
	eachMode(t, func(t *testing.T, mode string) {
		c := newCluster(t, "orders")
		r := newFaultRelay(t, mode, c.ListenAddrs(), 30*time.Second, 60)
		if err := r.start(t); err != nil {
			t.Fatal(err)
		}
		h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.TopicAuthorizationFailed, Count: -1})
		during := r.waitRetries(t, 25)
		h.Remove()
		r.assertAllDelivered(t, c.ListenAddrs())
		r.out.assertRetries(t, during, []string{`topic "orders"`, "TOPIC_AUTHORIZATION_FAILED", "grant it WRITE"}, nil)
		r.out.assertRoute(t, nil, nil)
		r.assertOneOutage(t, 0, "TOPIC_AUTHORIZATION_FAILED")
		r.assertNoLongWait(t)
	})
}

// assertNoLongWait checks that no retry waited for its deadline (the
// lease of these tests is 30s): a missing or refused topic is answered as
// soon as it is known.
func (r *faultRelay) assertNoLongWait(t *testing.T) {
	t.Helper()
	for _, err := range r.out.retriesSoFar() {
		var ne *NoAckError
		if errors.As(err, &ne) && ne.Waited > 10*time.Second {
			t.Fatalf("a batch waited for its deadline: %v", err)
		}
	}
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
		r.out.assertRoute(t, nil, nil)
		if lines := r.relay.lines(slog.LevelWarn, "another relay"); len(lines) > 0 {
			t.Fatalf("the relay reported rows owned by another relay: %q", lines)
		}
		if fenced := r.log.lines(slog.LevelWarn, "fenced"); len(fenced) > 0 {
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
