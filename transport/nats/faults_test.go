package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/internal/testdb"
)

// The table of docs/config.md ("Broker errors"), answer by answer.
func TestPublishErrorClassification(t *testing.T) {
	const (
		route   = "route"
		message = "message"
		retry   = "retry"
	)
	api := func(code int, errCode jetstream.ErrorCode) error {
		return &jetstream.APIError{Code: code, ErrorCode: errCode, Description: "injected"}
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{natsgo.ErrMaxPayload, message},
		{api(400, jetstream.JSErrCodeStreamMessageExceedsMaximum), message},
		{jetstream.ErrNoStreamResponse, route},
		{jetstream.ErrStreamNotFound, route},
		{api(400, codeStreamNotMatch), route},
		{api(503, codeStreamStoreFailed), route},
		{api(503, 10008), route}, // JetStream temporarily unavailable
		{jetstream.ErrJetStreamNotEnabled, route},
		{jetstream.ErrAsyncPublishTimeout, route},
		{jetstream.ErrTooManyStalledMsgs, route},
		{natsgo.ErrTimeout, route},
		{natsgo.ErrNoResponders, route},
		{natsgo.ErrConnectionClosed, route},
		{natsgo.ErrConnectionReconnecting, route},
		{natsgo.ErrAuthorization, route},
		{natsgo.ErrPermissionViolation, route},
		{natsgo.ErrAuthExpired, route},
		{natsgo.ErrAuthRevoked, route},
		{natsgo.ErrNoServers, route},
		{natsgo.ErrDisconnected, route},
		{natsgo.ErrConnectionDraining, route},
		{jetstream.ErrJetStreamNotEnabledForAccount, route},
		{context.DeadlineExceeded, route},
		{&NoAckError{Subject: "s", Waited: time.Second}, route},
		{api(400, 10003), retry}, // a bad request the Sender does not know
		{errors.New("something else"), retry},
	} {
		got := classify("ORDERS", "orders.x", c.err)
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
	}
	if got := classify("", "orders.x", jetstream.ErrNoStreamResponse).Error(); !strings.Contains(got, `no stream holds subject "orders.x"`) {
		t.Errorf("a publish no stream answered: %q does not name the subject", got)
	}
	if got := classify("ORDERS", "orders.x", jetstream.ErrStreamNotFound).Error(); !strings.Contains(got, `stream "ORDERS"`) {
		t.Errorf("a missing stream: %q does not name it", got)
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

// A configured stream that does not exist, and a subject no stream holds,
// fail Start with a *StreamError naming them; nothing is claimed.
func TestStartFailsWithoutTheStream(t *testing.T) {
	nc := connect(t)
	st, subj := newStream(t, nc, time.Minute)
	name := st.CachedInfo().Config.Name

	if _, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: subj + ".x", Stream: name + "_NOT"}); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("NewSender with a missing stream: %v", err)
	}
	for _, c := range []struct {
		name string
		cfg  SenderConfig
		want []string
	}{
		{"the configured stream deleted", SenderConfig{Subject: subj + ".x", Stream: name}, []string{`stream "` + name + `"`, "create it"}},
		{"a subject no stream holds", SenderConfig{Subject: "mt.nostream." + name}, []string{`no stream holds subject "mt.nostream.` + name + `"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, subj := newStream(t, nc, time.Minute)
			cfg := c.cfg
			cfg.Conn = nc
			if cfg.Stream != "" {
				cfg.Stream, cfg.Subject = st.CachedInfo().Config.Name, subj+".x"
				c.want[0] = `stream "` + cfg.Stream + `"`
			}
			s, err := NewSender(testCtx(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Stream != "" {
				js, _ := jetstream.New(nc)
				if err := js.DeleteStream(testCtx(t), cfg.Stream); err != nil {
					t.Fatal(err)
				}
			}
			store := newPGStore(t)
			cl, err := mensageria.New(store.drv, &mensageria.Config{App: "shop", Registry: mensageria.NewRegistry().MustRegister("order", s)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cl.Enqueue(testCtx(t), mensageria.Message{Type: "order", Key: "k", Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			err = cl.Start(context.Background())
			if err == nil {
				_ = cl.Stop(context.Background())
			}
			var se *StreamError
			if !errors.As(err, &se) || !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Fatalf("Start: %v, want a *StreamError", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Start's error does not say %q: %v", w, err)
				}
			}
			stats, err := store.drv.Stats(testCtx(t))
			if err != nil || len(stats) != 1 || stats[0].Pending != 1 {
				t.Fatalf("after a failed Start: %+v, %v; want the row pending", stats, err)
			}
		})
	}
}

// A stream full with DiscardNew refuses what it cannot store: the route's
// failure (the messages are fine), with no log line per message; the
// messages it took are delivered.
func TestFullStreamIsTheRoutesFailure(t *testing.T) {
	nc := connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("MT_FULL_%d", time.Now().UnixNano())
	if _, err := js.CreateStream(testCtx(t), jetstream.StreamConfig{Name: name, Subjects: []string{"mt." + name}, MaxMsgs: 5,
		Discard: jetstream.DiscardNew, Duplicates: time.Minute, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	log := &logRecords{}
	s, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: "mt." + name, Stream: name, Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	var stored, refused int
	for _, d := range deliveries("order", 1, 10) {
		switch err := s.Send(testCtx(t), d); {
		case err == nil:
			stored++
		case mensageria.IsUnavailable(err):
			refused++
		default:
			t.Fatalf("a full stream's refusal classified as the message's: %v", err)
		}
	}
	if stored != 5 || refused != 5 {
		t.Fatalf("%d stored and %d refused, want 5 and 5", stored, refused)
	}
	// The outage is the relay's route breaker's to log, once when the
	// route pauses; the sender adds no line per message.
	if warns := log.lines(slog.LevelWarn, ""); len(warns) != 0 {
		t.Fatalf("the sender logged %q", warns)
	}
}

// privateServer is a nats-server of the test's own, with JetStream on a
// store that outlives a restart, so that it can be stopped and started
// again on the same port.
type privateServer struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func startPrivateServer(t *testing.T) *privateServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nats-server"); serr != nil {
			testdb.Unavailable(t, "the nats-server binary", err)
		}
		bin = "/usr/sbin/nats-server"
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &privateServer{t: t, port: l.Addr().(*net.TCPAddr).Port, dir: t.TempDir()}
	l.Close()
	p.start(bin)
	t.Cleanup(p.stop)
	return p
}

func (p *privateServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", p.port) }

func (p *privateServer) start(bin string) {
	p.t.Helper()
	p.cmd = exec.Command(bin, "-a", "127.0.0.1", "-p", fmt.Sprint(p.port), "-js", "-sd", p.dir)
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err := natsgo.Connect(p.url(), natsgo.Timeout(time.Second))
		if err == nil {
			js, _ := jetstream.New(nc)
			_, err = js.AccountInfo(testCtx(p.t))
			nc.Close()
			if err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the private nats-server on %d did not start: %v", p.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (p *privateServer) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

// The server goes down while the relay publishes, and comes back: the
// batches without acknowledgements end by their deadline as the route's
// failure, saying the connection is not up; the outage is logged once
// when it starts and once when it ends; every row is delivered, none
// dead, and the stream holds each message once.
func TestServerDownAndBack(t *testing.T) {
	srv := startPrivateServer(t)
	bin := srv.cmd.Path
	nc, err := natsgo.Connect(srv.url(), natsgo.MaxReconnects(-1), natsgo.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(testCtx(t), jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders"},
		Duplicates: time.Hour, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	log, relayLog := &logRecords{}, &logRecords{}
	s, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: "orders", Stream: "ORDERS", Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	store := newPGStore(t)
	var (
		mu        sync.Mutex
		retried   []error
		postponed int
		bad       = map[mensageria.Outcome]int{}
		first     = make(chan struct{})
		once      sync.Once
	)
	hook := deliveryFunc(func(ev mensageria.DeliveryEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Outcome {
		case mensageria.OutcomeRetry, mensageria.OutcomePostponed:
			if ev.Outcome == mensageria.OutcomePostponed {
				postponed++
			}
			retried = append(retried, ev.Err)
			once.Do(func() { close(first) })
		case mensageria.OutcomeDead, mensageria.OutcomeFenced, mensageria.OutcomeExpired, mensageria.OutcomeUnsettled:
			bad[ev.Outcome]++
		}
	})
	cl, err := mensageria.New(store.drv, &mensageria.Config{App: "shop", Registry: mensageria.NewRegistry().MustRegister("order", s),
		Lease: 2 * time.Second, BatchSize: 20, PollInterval: 20 * time.Millisecond,
		// Few attempts: the outage must spend none of them (the route
		// pauses instead), or the messages would go dead.
		MaxAttempts: 3, BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		RoutePause: 100 * time.Millisecond, RoutePauseMax: time.Second,
		Hooks: []mensageria.Hook{hook}, Logger: slog.New(relayLog)})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Stop(context.Background()) })
	srv.stop()
	const n = 200
	for i := 0; i < n; i += 50 {
		batch := make([]mensageria.Message, 50)
		for k := range batch {
			batch[k] = mensageria.Message{Type: "order", Key: fmt.Sprintf("k%d", i+k), Payload: []byte(fmt.Sprintf(`{"n":%d}`, i+k))}
		}
		if _, err := cl.Enqueue(testCtx(t), batch...); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-first:
	case <-time.After(60 * time.Second):
		t.Fatal("no delivery failed with the server down")
	}
	srv.start(bin)
	waitFor(t, 90*time.Second, "the outbox drained", func() bool {
		st, err := store.drv.Stats(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		left := int64(0)
		for _, x := range st {
			left += x.Pending + x.InFlight
		}
		return left == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("deliveries dead, fenced, expired or unsettled: %v", bad)
	}
	if postponed == 0 {
		t.Fatal("no failure was the route's, its attempt left uncounted")
	}
	said := false
	for _, err := range retried {
		if !mensageria.IsUnavailable(err) {
			t.Fatalf("a failed delivery not marked as the route's failure: %v", err)
		}
		said = said || strings.Contains(err.Error(), "not connected to the server")
	}
	if !said {
		t.Fatalf("no failure says the connection is down: %v", retried)
	}
	// The outage is logged by the relay's route breaker, once as the
	// route pauses and once as it resumes; the sender adds nothing.
	if down := relayLog.lines(slog.LevelWarn, "route paused:"); len(down) != 1 || !strings.Contains(down[0], "not connected to the server") {
		t.Fatalf("the outage's start logged %d times, want once, saying the connection is down: %q", len(down), down)
	}
	if up := relayLog.lines(slog.LevelInfo, "route resumed"); len(up) != 1 {
		t.Fatalf("the outage's end logged %d times, want once: %q", len(up), up)
	}
	for _, bad := range []string{"lease expired", "another relay", "dead"} {
		if lines := relayLog.lines(slog.LevelWarn, bad); len(lines) > 0 {
			t.Fatalf("the relay logged %q: %q", bad, lines)
		}
	}
	if warns := log.lines(slog.LevelWarn, ""); len(warns) != 0 {
		t.Fatalf("the sender logged %q at warning level or above, want nothing", warns)
	}
	st, err := js.Stream(testCtx(t), "ORDERS")
	if err != nil {
		t.Fatal(err)
	}
	if got := msgCount(t, st); got != n {
		t.Fatalf("the stream holds %d messages, want %d (each once, inside its duplicate window)", got, n)
	}
}

// deliveryFunc is a mensageria.OnDelivery hook.
type deliveryFunc func(mensageria.DeliveryEvent)

func (f deliveryFunc) OnDelivery(ev mensageria.DeliveryEvent) { f(ev) }

// The stream is deleted while the relay publishes, and created again: the
// publishes find no stream, the route's failure naming it, its messages'
// attempts untouched (MaxAttempts 3); the outage is logged once as the
// route pauses and once as it resumes; every row is delivered, none dead,
// and the new stream holds each message once.
func TestStreamDeletedWhileRelaying(t *testing.T) {
	srv := startPrivateServer(t)
	nc, err := natsgo.Connect(srv.url())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders"}, Duplicates: time.Hour, Storage: jetstream.FileStorage}
	if _, err := js.CreateStream(testCtx(t), cfg); err != nil {
		t.Fatal(err)
	}
	log, relayLog := &logRecords{}, &logRecords{}
	s, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: "orders", Stream: "ORDERS", Logger: slog.New(log)})
	if err != nil {
		t.Fatal(err)
	}
	store := newPGStore(t)
	var (
		mu        sync.Mutex
		failed    []error
		postponed int
		bad       = map[mensageria.Outcome]int{}
		first     = make(chan struct{})
		once      sync.Once
	)
	hook := deliveryFunc(func(ev mensageria.DeliveryEvent) {
		mu.Lock()
		defer mu.Unlock()
		switch ev.Outcome {
		case mensageria.OutcomeRetry, mensageria.OutcomePostponed:
			if ev.Outcome == mensageria.OutcomePostponed {
				postponed++
			}
			failed = append(failed, ev.Err)
			once.Do(func() { close(first) })
		case mensageria.OutcomeDead, mensageria.OutcomeFenced, mensageria.OutcomeExpired, mensageria.OutcomeUnsettled:
			bad[ev.Outcome]++
		}
	})
	cl, err := mensageria.New(store.drv, &mensageria.Config{App: "shop", Registry: mensageria.NewRegistry().MustRegister("order", s),
		Lease: 5 * time.Second, BatchSize: 20, PollInterval: 20 * time.Millisecond,
		MaxAttempts: 3, BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		RoutePause: 100 * time.Millisecond, RoutePauseMax: time.Second,
		Hooks: []mensageria.Hook{hook}, Logger: slog.New(relayLog)})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Stop(context.Background()) })
	if err := js.DeleteStream(testCtx(t), "ORDERS"); err != nil {
		t.Fatal(err)
	}
	const n = 100
	batch := make([]mensageria.Message, n)
	for k := range batch {
		batch[k] = mensageria.Message{Type: "order", Key: fmt.Sprintf("k%d", k), Payload: []byte(fmt.Sprintf(`{"n":%d}`, k))}
	}
	if _, err := cl.Enqueue(testCtx(t), batch...); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first:
	case <-time.After(60 * time.Second):
		t.Fatal("no delivery failed with the stream deleted")
	}
	st, err := js.CreateStream(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 90*time.Second, "the outbox drained", func() bool {
		stats, err := store.drv.Stats(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		left := int64(0)
		for _, x := range stats {
			left += x.Pending + x.InFlight
		}
		return left == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(bad) > 0 {
		t.Fatalf("deliveries dead, fenced, expired or unsettled: %v", bad)
	}
	if postponed == 0 {
		t.Fatal("no failure was the route's, its attempt left uncounted")
	}
	for _, err := range failed {
		var se *StreamError
		if !mensageria.IsUnavailable(err) || !errors.As(err, &se) || !strings.Contains(err.Error(), `stream "ORDERS"`) {
			t.Fatalf("a failed delivery not the route's, naming the stream: %v", err)
		}
	}
	if down := relayLog.lines(slog.LevelWarn, "route paused:"); len(down) != 1 || !strings.Contains(down[0], `stream "ORDERS"`) {
		t.Fatalf("the outage's start logged %d times, want once, naming the stream: %q", len(down), down)
	}
	if up := relayLog.lines(slog.LevelInfo, "route resumed"); len(up) != 1 {
		t.Fatalf("the outage's end logged %d times, want once: %q", len(up), up)
	}
	if warns := log.lines(slog.LevelWarn, ""); len(warns) != 0 {
		t.Fatalf("the sender logged %q at warning level or above, want nothing", warns)
	}
	if got := msgCount(t, st); got != n {
		t.Fatalf("the stream holds %d messages, want %d", got, n)
	}
}
