package transporttest

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
)

// msgType is the one type the suite's relay delivers.
const msgType = "order"

// outcomes counts a relay's delivery events and keeps the failed ones:
// postponed (the route's failure, its attempt not counted) and retried
// (counted).
type outcomes struct {
	mu     sync.Mutex
	counts map[mensageria.Outcome]int
	failed []mensageria.DeliveryEvent
	// postponed is closed at the first delivery the route breaker took as
	// the route's failure. A batch on its way while another was answered
	// is counted against its own rows instead (the destination was
	// answering), so the first failure of an outage may be a counted
	// retry; a test waits for this one.
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
		ev.Context = nil // not kept past the attempt
		o.failed = append(o.failed, ev)
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

// failures returns the failed deliveries up to now.
func (o *outcomes) failures() []mensageria.DeliveryEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.failed)
}

// relay is the real relay on PostgreSQL with the Sender under test, its
// logs and outcomes captured.
type relay struct {
	drv    driver.Driver
	client *mensageria.Client
	sender *LogRecords // the Sender's log
	log    *LogRecords // the relay's
	out    *outcomes
	ids    []string
	sent   int // messages enqueued, numbering the payloads
}

// relayConfig tunes the suite's relay: a lease of the test's, and few
// attempts, so that an outage that spent them would park the messages
// dead where the test would see it.
type relayConfig struct {
	lease   time.Duration
	ordered bool
}

// newRelay builds a relay for sender, whose log is senderLog. It is not
// started.
func newRelay(t *testing.T, sender mensageria.Sender, senderLog *LogRecords, rc relayConfig) *relay {
	t.Helper()
	pool := testdb.Pool(t)
	drv, err := postgres.New(pool, &postgres.Config{Schema: testdb.Schema(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drv.Migrate(ctxOf(t), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	r := &relay{drv: drv, sender: senderLog, log: &LogRecords{}, out: newOutcomes()}
	var opts []mensageria.RouteOption
	if rc.ordered {
		opts = append(opts, mensageria.Ordered())
	}
	cl, err := mensageria.New(drv, &mensageria.Config{
		App: "shop", Registry: mensageria.NewRegistry().MustRegister(msgType, sender, opts...),
		Lease: rc.lease, BatchSize: 20, PollInterval: 20 * time.Millisecond,
		MaxAttempts: 3, BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		RoutePause: 100 * time.Millisecond, RoutePauseMax: time.Second,
		Hooks: []mensageria.Hook{r.out}, Logger: slog.New(r.log),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.client = cl
	return r
}

// senderUnder builds the harness's Sender with a captured log, and a relay
// for it.
func senderUnder(t *testing.T, newSender func(*testing.T, *slog.Logger) mensageria.Sender, rc relayConfig) (mensageria.Sender, *relay) {
	t.Helper()
	log := &LogRecords{}
	s := newSender(t, slog.New(log))
	return s, newRelay(t, s, log, rc)
}

// start starts the relay, and stops it when the test ends.
func (r *relay) start(t *testing.T) error {
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

// payload is the suite's payload of the n-th message.
func payload(n int) []byte { return fmt.Appendf(nil, `{"n":%d}`, n) }

// enqueue stores n messages over keys keys, 100 to a transaction.
func (r *relay) enqueue(t *testing.T, n, keys int) {
	t.Helper()
	for i := 0; i < n; i += 100 {
		batch := make([]mensageria.Message, min(100, n-i))
		for k := range batch {
			seq := r.sent + k
			batch[k] = mensageria.Message{Type: msgType, Key: fmt.Sprintf("k-%d", seq%keys), Payload: payload(seq)}
		}
		r.enqueueMessages(t, batch...)
	}
}

func (r *relay) enqueueMessages(t *testing.T, msgs ...mensageria.Message) {
	t.Helper()
	got, err := r.client.Enqueue(ctxOf(t), msgs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range got {
		r.ids = append(r.ids, id.String())
	}
	r.sent += len(msgs)
}

// stats sums the type's counts.
func (r *relay) stats(t *testing.T) driver.TypeStats {
	t.Helper()
	st, err := r.drv.Stats(ctxOf(t))
	if err != nil {
		t.Fatal(err)
	}
	var sum driver.TypeStats
	for _, s := range st {
		sum.Pending += s.Pending
		sum.InFlight += s.InFlight
		sum.Dead += s.Dead
	}
	return sum
}

// waitDrained waits until no row is pending or in flight.
func (r *relay) waitDrained(t *testing.T) {
	t.Helper()
	eventually(t, 90*time.Second, "the outbox drained", func() bool {
		s := r.stats(t)
		return s.Pending+s.InFlight == 0
	})
}

// waitPostponed waits for the relay's first delivery postponed as the
// route's failure.
func (r *relay) waitPostponed(t *testing.T) {
	t.Helper()
	select {
	case <-r.out.postponed:
	case <-time.After(60 * time.Second):
		t.Fatal("no delivery was postponed as the route's failure within a minute")
	}
}

// waitFailures waits for n failed deliveries and returns them.
func (r *relay) waitFailures(t *testing.T, n int) []mensageria.DeliveryEvent {
	t.Helper()
	eventually(t, 60*time.Second, fmt.Sprintf("%d failed deliveries", n), func() bool { return len(r.out.failures()) >= n })
	return r.out.failures()
}

// assertNoneDead checks that the outbox holds no dead letter and that the
// relay parked nothing.
func (r *relay) assertNoneDead(t *testing.T) {
	t.Helper()
	if s := r.stats(t); s.Dead > 0 {
		t.Fatalf("%d dead letters", s.Dead)
	}
	if dead := r.log.Lines(slog.LevelWarn, "dead"); len(dead) > 0 {
		t.Fatalf("the relay parked messages: %q", dead)
	}
}

// assertRouteFailures checks that every failed delivery was the route's
// (mensageria.Unavailable), that one at least was postponed, its attempt
// not counted (the route breaker's doing), and that none went dead, was
// fenced, expired or was left unsettled.
func (r *relay) assertRouteFailures(t *testing.T) {
	t.Helper()
	failed := r.out.failures()
	if len(failed) == 0 {
		t.Fatal("no delivery failed: the fault did not happen")
	}
	for _, ev := range failed {
		if !mensageria.IsUnavailable(ev.Err) {
			t.Fatalf("a failed delivery not marked as the route's failure: %v", ev.Err)
		}
	}
	if r.out.count(mensageria.OutcomePostponed) == 0 {
		t.Fatal("no failure was the route's, its attempt left uncounted")
	}
	for _, k := range []mensageria.Outcome{mensageria.OutcomeDead, mensageria.OutcomeFenced, mensageria.OutcomeExpired, mensageria.OutcomeUnsettled} {
		if n := r.out.count(k); n > 0 {
			t.Fatalf("%d deliveries %s", n, k)
		}
	}
}

// assertOneOutage checks that the outage was logged once as it started
// (the relay pausing the route, its line saying each of want) and once
// as it ended (the route resumed), that the relay logged no lease lost,
// rows of another relay or dead letters, and that the Sender logged
// nothing at warning level but, when startWarning is set, one line
// saying it.
func (r *relay) assertOneOutage(t *testing.T, startWarning string, want ...string) {
	t.Helper()
	down := r.log.Lines(slog.LevelWarn, "route paused:")
	if len(down) != 1 {
		t.Fatalf("the outage's start logged %d times, want once: %q", len(down), down)
	}
	for _, w := range want {
		if !strings.Contains(down[0], w) {
			t.Fatalf("the outage's line does not say %q: %s", w, down[0])
		}
	}
	if up := r.log.Lines(slog.LevelInfo, "route resumed"); len(up) != 1 {
		t.Fatalf("the outage's end logged %d times, want once: %q", len(up), up)
	}
	for _, bad := range []string{"lease expired", "another relay", "dead"} {
		if lines := r.log.Lines(slog.LevelWarn, bad); len(lines) > 0 {
			t.Fatalf("the relay logged %q: %q", bad, lines)
		}
	}
	warns := r.sender.Lines(slog.LevelWarn, "")
	checks, wantWarns := 0, 0
	if startWarning != "" {
		checks, wantWarns = len(r.sender.Lines(slog.LevelWarn, startWarning)), 1
	}
	if len(warns) != wantWarns || checks != wantWarns {
		t.Fatalf("the sender logged %q at warning level or above, want %d line(s) saying %q", warns, wantWarns, startWarning)
	}
}

// assertReadyWhilePaused checks what a probe sees during an outage:
// Routes reporting the route paused (or probing), with its failures and
// last error, and Ready nil all the while (a paused route is its own
// problem). The first failures may come before the route breaker pauses
// the route, so it waits for the pause.
func (r *relay) assertReadyWhilePaused(t *testing.T) {
	t.Helper()
	eventually(t, 60*time.Second, "Routes reporting the route paused with its error", func() bool {
		if err := r.client.Ready(); err != nil {
			t.Fatalf("Ready during an outage of one route: %v", err)
		}
		rs := r.client.Routes()
		if len(rs) != 1 {
			t.Fatalf("Routes: %+v, want the one route", rs)
		}
		h := rs[0]
		return h.State != mensageria.RouteFlowing && h.LastError != "" && h.Failures > 0
	})
}

// waitFlowing waits for Routes to report the route flowing again.
func (r *relay) waitFlowing(t *testing.T) {
	t.Helper()
	eventually(t, 30*time.Second, "the route flowing again", func() bool {
		rs := r.client.Routes()
		return len(rs) == 1 && rs[0].State == mensageria.RouteFlowing
	})
}

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or d passes. It stays here until
// internal/testsignal offers a shared poll.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
