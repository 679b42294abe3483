package nats

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
)

// A redelivery inside the duplicate window is dropped by the server.
func TestRedeliveryInsideWindowDropped(t *testing.T) {
	nc := connect(t)
	st, subj := newStream(t, nc, time.Minute)
	s, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: subj + ".orders", Stream: st.CachedInfo().Config.Name})
	if err != nil {
		t.Fatal(err)
	}
	ds := deliveries("order", 1, 20)
	for range 3 { // the first delivery and two redeliveries by the relay
		if errs := s.SendBatch(testCtx(t), ds); errs != nil {
			t.Fatal(errors.Join(errs...))
		}
	}
	if n := msgCount(t, st); n != 20 {
		t.Fatalf("stream holds %d messages after 3 deliveries of 20, want 20", n)
	}
}

type pgStore struct {
	drv    *postgres.Driver
	schema string
}

func newPGStore(t testing.TB) *pgStore {
	t.Helper()
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	drv, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drv.Migrate(testCtx(t), driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(testCtx(t), "CREATE TABLE "+schema+".applied (seq bigint, value text)"); err != nil {
		t.Fatal(err)
	}
	return &pgStore{drv: drv, schema: schema}
}

func (s *pgStore) insert(ctx context.Context, tx mensageria.Tx, seq uint64, value string) error {
	_, err := tx.Raw().(pgx.Tx).Exec(ctx, "INSERT INTO "+s.schema+".applied VALUES ($1, $2)", int64(seq), value)
	return err
}

func (s *pgStore) counts(t testing.TB) (map[string]int, int) {
	t.Helper()
	rows, err := testdb.Pool(t).Query(testCtx(t), "SELECT value, count(*) FROM "+s.schema+".applied GROUP BY value")
	if err != nil {
		t.Fatal(err)
	}
	out, total := map[string]int{}, 0
	for rows.Next() {
		var v string
		var n int
		if err := rows.Scan(&v, &n); err != nil {
			t.Fatal(err)
		}
		out[v] = n
		total += n
	}
	return out, total
}

// Past the window the server stores the redelivery again; the receiver's
// inbox absorbs it.
func TestRedeliveryOutsideWindowAbsorbedByInbox(t *testing.T) {
	nc := connect(t)
	store := newPGStore(t)
	const window = 500 * time.Millisecond
	st, subj := newStream(t, nc, window)
	s, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: subj + ".orders", Stream: st.CachedInfo().Config.Name})
	if err != nil {
		t.Fatal(err)
	}
	d := deliveries("order", 1, 1)[0]
	if err := s.Send(testCtx(t), d); err != nil {
		t.Fatal(err)
	}
	time.Sleep(window + 300*time.Millisecond) // the server's duplicate window runs out on its clock
	redelivery := *d
	redelivery.Attempt = 2
	if err := s.Send(testCtx(t), &redelivery); err != nil {
		t.Fatal(err)
	}
	if n := msgCount(t, st); n != 2 {
		t.Fatalf("stream holds %d messages; the redelivery past the window should be stored again", n)
	}

	inbox, err := mensageria.NewInbox(store.drv, mensageria.InboxConfig{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	cons, err := st.CreateConsumer(testCtx(t), jetstream.ConsumerConfig{AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cons.Fetch(2, jetstream.FetchMaxWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var dups int
	for m := range b.Messages() {
		dl, err := DeliveryOf(m)
		if err != nil {
			t.Fatal(err)
		}
		res, err := inbox.Apply(testCtx(t), dl, func(ctx context.Context, tx mensageria.Tx, dl *mensageria.Delivery) error {
			md, _ := m.Metadata()
			return store.insert(ctx, tx, md.Sequence.Stream, dl.Key)
		})
		if err != nil {
			t.Fatal(err)
		}
		if res.Duplicate {
			dups++
			if res.FirstID != d.ID {
				t.Fatalf("duplicate reports first id %s, want %s", res.FirstID, d.ID)
			}
		}
		_ = m.Ack()
	}
	got, total := store.counts(t)
	if total != 1 || got[d.Key] != 1 || dups != 1 {
		t.Fatalf("effects %v (total %d), duplicates %d; want the effect once and one duplicate", got, total, dups)
	}
}

// Check warns when the retry horizon outlives the duplicate window.
func TestCheckWarnsWhenHorizonExceedsWindow(t *testing.T) {
	nc := connect(t)
	st, subj := newStream(t, nc, 2*time.Minute)
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	horizon := RetryHorizon(mensageria.Config{})
	s, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: subj + ".x", Stream: st.CachedInfo().Config.Name, Horizon: horizon, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if !strings.Contains(out, "duplicate window") || !strings.Contains(out, "retry_horizon") {
		t.Fatalf("no warning for a %s horizon over a 2m window: %q", horizon, out)
	}
	s.horizon.Store(int64(time.Minute))
	if r, err := s.Check(testCtx(t)); err != nil || !r.Covered || r.DuplicateWindow != 2*time.Minute {
		t.Fatalf("Check = %+v, %v; want covered by the 2m window", r, err)
	}
	// Defaults: 20 attempts of up to 30s, backoff 1s doubling to 10m.
	if want := 20*30*time.Second + 1023*time.Second + 9*10*time.Minute; horizon != want {
		t.Fatalf("RetryHorizon(defaults) = %s, want %s", horizon, want)
	}
}

// At Start the relay hands the sender its retry horizon; a stream whose
// duplicate window is shorter is named in a warning with both figures,
// found through the subject when the config names no stream. A window
// that covers the horizon is not warned about.
func TestRelaySettingsCheckTheDuplicateWindow(t *testing.T) {
	nc := connect(t)
	st, subj := newStream(t, nc, 2*time.Minute)
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	s, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: subj + ".x", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	logged := func() string {
		mu.Lock()
		defer mu.Unlock()
		out := buf.String()
		buf.Reset()
		return out
	}
	if out := logged(); out != "" {
		t.Fatalf("NewSender without a stream logged %q", out)
	}
	if err := s.UseRelaySettings(mensageria.RelaySettings{App: "shop", RetryHorizon: 90 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if out := logged(); strings.Contains(out, "WARN") {
		t.Fatalf("a 90s horizon inside a 2m window was warned about: %q", out)
	}
	if err := s.UseRelaySettings(mensageria.RelaySettings{App: "shop", RetryHorizon: 3 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	out := logged()
	name := st.CachedInfo().Config.Name
	for _, want := range []string{"level=WARN", "duplicate window", "stream=" + name, "duplicate_window=2m0s", "retry_horizon=3h0m0s"} {
		if !strings.Contains(out, want) {
			t.Fatalf("warning lacks %q: %q", want, out)
		}
	}
	if r, err := s.Check(testCtx(t)); err != nil || r.Covered || r.Horizon != 3*time.Hour || r.Stream != name {
		t.Fatalf("Check after the relay's settings = %+v, %v; want the 3h horizon, not covered", r, err)
	}

	// A subject picked per delivery with no stream named cannot be
	// checked: said at info level, and Start goes on.
	perKey, err := NewSender(testCtx(t), SenderConfig{Conn: nc, SubjectFor: func(d *mensageria.Delivery) string { return subj + "." + d.Key }, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := perKey.UseRelaySettings(mensageria.RelaySettings{RetryHorizon: 3 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	if out := logged(); !strings.Contains(out, "not checked") {
		t.Fatalf("no word that the window was not checked: %q", out)
	}
}

// Registered with a Client, the sender needs no Horizon: Start hands it
// the relay's own, and the warning names it beside the window.
func TestStartChecksTheDuplicateWindow(t *testing.T) {
	nc := connect(t)
	store := newPGStore(t)
	st, subj := newStream(t, nc, 2*time.Minute)
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, nil))
	s, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Subject: subj + ".orders", Stream: st.CachedInfo().Config.Name, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &mensageria.Config{App: "shop", Registry: mensageria.NewRegistry().MustRegister("order", s), MaxAttempts: 8, Lease: 10 * time.Second}
	cl, err := mensageria.New(store.drv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	before := buf.String()
	mu.Unlock()
	if strings.Contains(before, "WARN") {
		t.Fatalf("a sender without a horizon warned before Start: %q", before)
	}
	if err := cl.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer cl.Stop(context.Background())
	// 8 attempts of up to 10s, backoff 1s doubling to 64s: past the
	// window.
	want := RetryHorizon(cl.Config())
	if want != 8*10*time.Second+127*time.Second {
		t.Fatalf("RetryHorizon = %s", want)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, w := range []string{"level=WARN", "duplicate_window=2m0s", "retry_horizon=" + want.String()} {
		if !strings.Contains(out, w) {
			t.Fatalf("Start did not warn with %q: %q", w, out)
		}
	}
}

// The destination a dead letter names.
func TestSenderDestination(t *testing.T) {
	nc := connect(t)
	for _, c := range []struct {
		cfg  SenderConfig
		want string
	}{
		{SenderConfig{Subject: "orders.created"}, "nats subject orders.created"},
		{SenderConfig{SubjectFor: func(*mensageria.Delivery) string { return "x" }}, "nats (subject per delivery)"},
	} {
		c.cfg.Conn = nc
		s, err := NewSender(testCtx(t), c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Destination(); got != c.want {
			t.Errorf("Destination() = %q, want %q", got, c.want)
		}
	}
	st, subj := newStream(t, nc, time.Minute)
	s, err := NewSender(testCtx(t), SenderConfig{Conn: nc, Stream: st.CachedInfo().Config.Name, SubjectFor: func(*mensageria.Delivery) string { return subj + ".a" }})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.Destination(), "nats stream "+st.CachedInfo().Config.Name; got != want {
		t.Errorf("Destination() = %q, want %q", got, want)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// The sink is killed in the middle of a batch, and again after a commit
// but before its acknowledgements; every effect is applied exactly once.
func TestSinkKilledMidBatchAppliesEachEffectOnce(t *testing.T) {
	nc := connect(t)
	store := newPGStore(t)
	const n = 500
	st, ds := publishEvents(t, nc, n)
	name := st.CachedInfo().Config.Name

	var calls atomic.Int64
	ctx1, kill := context.WithCancel(context.Background())
	defer kill()
	effect := func(ctx context.Context, tx mensageria.Tx, m jetstream.Msg) error {
		if calls.Add(1) == 230 {
			kill() // dies inside the transaction: it rolls back
			return ctx.Err()
		}
		md, _ := m.Metadata()
		return store.insert(ctx, tx, md.Sequence.Stream, m.Headers().Get(HeaderKey))
	}
	cfg := SinkConfig{Conn: nc, Stream: name, Consumer: "projector", Driver: store.drv, Effect: effect, Batch: 50, MaxWait: 200 * time.Millisecond, AckWait: 2 * time.Second}
	s1, err := NewSink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s1.Run(ctx1); err != nil {
		t.Fatal(err)
	}
	_, applied1 := store.counts(t)
	if applied1 == 0 || applied1 >= n {
		t.Fatalf("first sink applied %d; the kill should land mid-way", applied1)
	}

	// The second sink commits a batch and dies before acknowledging it:
	// the connection drops, the messages are redelivered to the third.
	nc2 := connect(t)
	ctx2, kill2 := context.WithCancel(context.Background())
	defer kill2()
	var batches atomic.Int64
	cfg2 := cfg
	cfg2.Conn = nc2
	cfg2.Effect = func(ctx context.Context, tx mensageria.Tx, m jetstream.Msg) error {
		md, _ := m.Metadata()
		return store.insert(ctx, tx, md.Sequence.Stream, m.Headers().Get(HeaderKey))
	}
	s2, err := NewSink(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	s2.afterCommit = func() {
		if batches.Add(1) == 2 {
			nc2.Close() // no ack will reach the server
			kill2()
		}
	}
	if err := s2.Run(ctx2); err != nil {
		t.Logf("second sink: %v", err)
	}

	cfg3 := cfg2
	cfg3.Conn = nc
	var statApplied, statSkipped, statTxs atomic.Int64
	cfg3.OnBatch = func(b BatchStats) {
		statApplied.Add(int64(b.Applied))
		statSkipped.Add(int64(b.Skipped))
		statTxs.Add(1)
		if b.Stream != name || b.Applied+b.Skipped > cfg3.Batch || b.Duration <= 0 {
			t.Errorf("batch stats %+v: stream %q, at most %d messages, a duration", b, name, cfg3.Batch)
		}
	}
	s3, err := NewSink(cfg3)
	if err != nil {
		t.Fatal(err)
	}
	ctx3, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s3.Run(ctx3) }()
	mensageriatest.Eventually(t, 30*time.Second, func() bool { _, tot := store.counts(t); return tot >= n }, "every effect applied")
	// Every message acknowledged: nothing left for the third sink to
	// apply a second time before it stops.
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		cons, err := st.Consumer(testCtx(t), cfg3.Consumer)
		if err != nil {
			return false
		}
		info, err := cons.Info(testCtx(t))
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.AckFloor.Stream == n
	}, "every message acknowledged")
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got, total := store.counts(t)
	for _, d := range ds {
		if got[d.Key] != 1 {
			t.Errorf("%s applied %d times", d.Key, got[d.Key])
		}
	}
	if total != n {
		t.Errorf("%d effects, want %d", total, n)
	}
	if statApplied.Load() != s3.Applied() || statSkipped.Load() != s3.Skipped() || statTxs.Load() == 0 {
		t.Errorf("OnBatch saw %d applied, %d skipped in %d transactions; the sink counted %d, %d",
			statApplied.Load(), statSkipped.Load(), statTxs.Load(), s3.Applied(), s3.Skipped())
	}
	t.Logf("applied: first %d, second %d, third %d (skipped %d, resets %d)", applied1, s2.Applied(), s3.Applied(), s3.Skipped(), s3.Resets())
	_ = fmt.Sprint()
}
