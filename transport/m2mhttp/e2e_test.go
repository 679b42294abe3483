package m2mhttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/mensageriatest"
)

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// startRelay runs an app whose registry sends each type to its URL.
// retries counts the relay's retry outcomes and keeps the last error of
// each type.
// retries counts the attempts that failed and will be tried again:
// counted ones (retry) and the ones a destination's failure postponed
// without counting.
type retries struct {
	mu        sync.Mutex
	n         int
	postponed int
	last      map[string]string
}

func (r *retries) OnDelivery(ev mensageria.DeliveryEvent) {
	if ev.Outcome != mensageria.OutcomeRetry && ev.Outcome != mensageria.OutcomePostponed {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.Outcome == mensageria.OutcomeRetry {
		r.n++
	} else {
		r.postponed++
	}
	if r.last == nil {
		r.last = map[string]string{}
	}
	r.last[ev.Type] = ev.Err.Error()
}

func startRelay(t *testing.T, drv *postgres.Driver, routes map[string]string, tune func(*mensageria.Config)) *mensageria.Client {
	t.Helper()
	return startRelayWith(t, drv, routes, false, 300*time.Millisecond, tune)
}

// startRelayWith is startRelay whose routes use a BatchSender when batch
// is set, with the given request timeout.
func startRelayWith(t *testing.T, drv *postgres.Driver, routes map[string]string, batch bool, timeout time.Duration, tune func(*mensageria.Config)) *mensageria.Client {
	t.Helper()
	reg := mensageria.NewRegistry()
	for typ, url := range routes {
		cfg := SenderConfig{URL: url, Token: "new-token", Timeout: timeout}
		var s mensageria.Sender
		var err error
		if batch {
			s, err = NewBatchSender(cfg)
		} else {
			s, err = NewSender(cfg)
		}
		if err != nil {
			t.Fatal(err)
		}
		reg.MustRegister(typ, s)
	}
	cfg := &mensageria.Config{
		App: "orders", Registry: reg,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		// Small batches inside a roomy lease: a batch of slow deliveries
		// should not outlive its lease on a loaded machine.
		BatchSize: 20, Lease: 5 * time.Second, PollInterval: 50 * time.Millisecond, MaxAttempts: 50,
		// A route paused by a run of failures probes on the same scale.
		RoutePause: 20 * time.Millisecond, RoutePauseMax: 200 * time.Millisecond,
		// Keep delivered rows so the test can read their attempt counts.
		DeliveredRetention: time.Hour,
		Logger:             quietLogger(),
	}
	if tune != nil {
		tune(cfg)
	}
	c, err := mensageria.New(drv, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// TestEndToEndUnreliableReceiver: PostgreSQL outbox → relay → loopback
// HTTP → receiver inbox, with a receiver that randomly fails (503), hangs
// past the sender's timeout, or applies and then drops the connection
// before answering (a lost ack). Every message must be applied exactly
// once and none lost; the redeliveries are counted.
func TestEndToEndUnreliableReceiver(t *testing.T) { unreliableReceiver(t, false) }

// TestEndToEndBatchUnreliableReceiver is TestEndToEndUnreliableReceiver
// with batch requests: every failure hits a whole batch, and a lost ack
// loses the answers of every envelope in it.
func TestEndToEndBatchUnreliableReceiver(t *testing.T) { unreliableReceiver(t, true) }

func unreliableReceiver(t *testing.T, batch bool) {
	const n = 300
	drv, pool, schema := pg(t)
	ctx := context.Background()
	inbox, record := newBilling(t, drv, pool, schema)
	rc, err := NewReceiver(ReceiverConfig{
		Tokens:   []string{"new-token"},
		Handlers: map[string]Handler{"order.closed": {Inbox: inbox, Effect: record}},
		Logger:   quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := conforms(t, rc)

	var failed, hung, lostAck, passed, duplicates atomic.Int64
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rngMu.Lock()
		p := rng.Float64()
		rngMu.Unlock()
		switch {
		case p < 0.15:
			failed.Add(1)
			writeProblem(w, Problem{Type: ProblemUnavailable, Title: "Unavailable", Status: 503}, 0)
		case p < 0.25:
			hung.Add(1)
			// Reading the body lets the server notice the sender hang up.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done(): // the sender gives up first
			case <-time.After(5 * time.Second):
			}
		case p < 0.40:
			lostAck.Add(1)
			rec := httptest.NewRecorder()
			checked.ServeHTTP(rec, r) // applied and committed...
			if strings.Contains(rec.Body.String(), "duplicate") {
				duplicates.Add(1)
			}
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close() // ...but the answer never leaves
			}
		default:
			passed.Add(1)
			rec := httptest.NewRecorder()
			checked.ServeHTTP(rec, r)
			if strings.Contains(rec.Body.String(), "duplicate") {
				duplicates.Add(1)
			}
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
		}
	}))
	defer srv.Close()

	var hook retries
	// A 1s request timeout: at 300ms, under -race on a loaded machine,
	// honest deliveries time out as often as the hung ones.
	client := startRelayWith(t, drv, map[string]string{"order.closed": srv.URL + "/m2m"}, batch, time.Second, func(c *mensageria.Config) {
		c.Hooks = []mensageria.Hook{&hook}
		if batch {
			// Batches of 5: enough requests for the chaos to hit each kind.
			c.BatchSize = 5
		}
	})
	msgs := make([]mensageria.Message, 0, n)
	for i := range n {
		msgs = append(msgs, mensageria.Message{Type: "order.closed", Key: fmt.Sprintf("order-%04d", i), Payload: []byte(`{"total":1}`)})
	}
	for i := 0; i < n; i += 50 {
		if _, err := client.Enqueue(ctx, msgs[i:i+50]...); err != nil {
			t.Fatal(err)
		}
	}
	mensageriatest.Eventually(t, 90*time.Second, func() bool {
		return count(t, pool, "SELECT count(*) FROM "+schema+".outbox WHERE state = 'pending'") == 0
	}, "every message to settle")

	if dead := count(t, pool, "SELECT count(*) FROM "+schema+".outbox WHERE state = 'dead'"); dead != 0 {
		t.Fatalf("%d messages dead", dead)
	}
	if got := count(t, pool, "SELECT count(*) FROM "+schema+".effects"); got != n {
		t.Errorf("%d effects for %d messages", got, n)
	}
	if got := count(t, pool, "SELECT count(DISTINCT key) FROM "+schema+".effects"); got != n {
		t.Errorf("%d distinct keys applied, want %d", got, n)
	}
	if twice := count(t, pool, "SELECT count(*) FROM (SELECT key FROM "+schema+".effects GROUP BY key HAVING count(*) > 1) d"); twice != 0 {
		t.Errorf("%d keys applied more than once", twice)
	}
	// The outbox counts the attempts that were the messages' own; a
	// failure while the route answered nothing else was the
	// destination's, postponed without counting.
	counted := count(t, pool, "SELECT coalesce(sum(attempts), 0) - count(*) FROM "+schema+".outbox")
	hook.mu.Lock()
	retried, postponed := hook.n, hook.postponed
	hook.mu.Unlock()
	// Attempts also count claims whose lease ran out on a loaded machine,
	// which the relay reports as fenced rather than retried.
	if retried > counted {
		t.Errorf("relay reported %d counted retries, outbox counts only %d redeliveries", retried, counted)
	}
	t.Logf("batch %v, %d messages: %d redeliveries (%d counted, %d postponed by the route); receiver answered 503 %d, hung %d, lost the ack %d, passed %d; %d duplicates absorbed",
		batch, n, retried+postponed, retried, postponed, failed.Load(), hung.Load(), lostAck.Load(), passed.Load(), duplicates.Load())
	if retried+postponed < int(failed.Load()+hung.Load()+lostAck.Load())/2 || lostAck.Load() == 0 || duplicates.Load() == 0 {
		t.Errorf("the chaos did not exercise redelivery enough")
	}
}

// TestEndToEndResponseClasses: through the real relay, each class of
// answer ends as documented: delivered, retried (Retry-After honoured)
// then delivered, or dead with the receiver's reason.
func TestEndToEndResponseClasses(t *testing.T) {
	drv, pool, schema := pg(t)
	type behaviour struct {
		status     int
		retryAfter string
		failFirst  int // answer status this many times, then 200
		problem    string
	}
	routes := map[string]behaviour{
		"c.ok":       {status: 200},
		"c.redirect": {status: 302},
		"c.bad":      {status: 400, problem: "field key: required field missing"},
		"c.stale":    {status: 409, problem: "older than the dedup window"},
		"c.refused":  {status: 422, problem: "no such order"},
		"c.gone":     {status: 404},
		"c.throttle": {status: 429, retryAfter: "2", failFirst: 1},
		"c.down":     {status: 503, failFirst: 3},
		"c.timeout":  {status: 408, failFirst: 2},
		// A long refusal in a multibyte script: cut at the byte limit it
		// would end inside a character, which PostgreSQL refuses to store.
		"c.long": {status: 422, problem: "x" + strings.Repeat("é", maxReasonFromPeerLength)},
	}
	var mu sync.Mutex
	hits := map[string]int{}
	firstHit := map[string]time.Time{}
	secondHit := map[string]time.Time{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		typ := strings.TrimPrefix(r.URL.Path, "/")
		b := routes[typ]
		mu.Lock()
		hits[typ]++
		h := hits[typ]
		if h == 1 {
			firstHit[typ] = time.Now()
		} else if h == 2 {
			secondHit[typ] = time.Now()
		}
		mu.Unlock()
		if b.status == 200 || (b.failFirst > 0 && h > b.failFirst) {
			w.Header().Set("Content-Type", contentTypeJSON)
			_, _ = w.Write(bodyApplied)
			return
		}
		if b.retryAfter != "" {
			w.Header().Set("Retry-After", b.retryAfter)
		}
		if b.status == 302 {
			w.Header().Set("Location", "http://127.0.0.1:1/elsewhere")
		}
		// Written by hand: a foreign receiver, free to leave Retry-After out.
		w.Header().Set("Content-Type", contentTypeProblem)
		w.WriteHeader(b.status)
		_ = json.NewEncoder(w).Encode(Problem{Type: ProblemTypeBase + "x", Title: http.StatusText(b.status), Status: b.status, Detail: b.problem})
	}))
	defer srv.Close()
	urls := map[string]string{}
	for typ := range routes {
		urls[typ] = srv.URL + "/" + typ
	}
	var hook retries
	client := startRelay(t, drv, urls, func(c *mensageria.Config) {
		c.BackoffMax = 5 * time.Second
		c.Hooks = []mensageria.Hook{&hook}
	})
	var msgs []mensageria.Message
	for typ := range routes {
		msgs = append(msgs, mensageria.Message{Type: typ, Key: "k-" + typ})
	}
	if _, err := client.Enqueue(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		return count(t, pool, "SELECT count(*) FROM "+schema+".outbox WHERE state = 'pending'") == 0
	}, "every message to settle")
	rows, err := pool.Query(context.Background(), "SELECT type, state, attempts, coalesce(last_error, '') FROM "+schema+".outbox")
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		state    string
		attempts int
		lastErr  string
	}
	got := map[string]row{}
	for rows.Next() {
		var typ string
		var r row
		if err := rows.Scan(&typ, &r.state, &r.attempts, &r.lastErr); err != nil {
			t.Fatal(err)
		}
		got[typ] = r
	}
	want := map[string]struct {
		state    string
		attempts int
		reason   string
	}{
		"c.ok":       {"delivered", 1, ""},
		"c.redirect": {"dead", 1, "redirect not followed"},
		"c.bad":      {"dead", 1, "required field missing"},
		"c.stale":    {"dead", 1, "older than the dedup window"},
		"c.refused":  {"dead", 1, "no such order"},
		"c.gone":     {"dead", 1, "404"},
		// About the destination: retried without spending the
		// message's attempts (the route answered nothing else meanwhile).
		"c.throttle": {"delivered", 1, "429"},
		"c.down":     {"delivered", 1, "503"},
		"c.timeout":  {"delivered", 1, "408"},
		"c.long":     {"dead", 1, "xéé"},
	}
	for typ, w := range want {
		g := got[typ]
		if g.state == "delivered" { // its last_error is cleared on delivery
			hook.mu.Lock()
			g.lastErr = hook.last[typ]
			hook.mu.Unlock()
		}
		if g.state != w.state || g.attempts != w.attempts || !strings.Contains(g.lastErr, w.reason) {
			t.Errorf("%s: state %s after %d attempts, last error %q; want %s after %d with %q", typ, g.state, g.attempts, g.lastErr, w.state, w.attempts, w.reason)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := secondHit["c.throttle"].Sub(firstHit["c.throttle"]); gap < 1900*time.Millisecond {
		t.Errorf("Retry-After: 2 not honoured: retried after %s (backoff base is 10ms)", gap)
	}
	if gap := secondHit["c.down"].Sub(firstHit["c.down"]); gap > 1500*time.Millisecond {
		t.Errorf("503 without Retry-After waited %s, want the short backoff", gap)
	}
	if hits["c.redirect"] != 1 {
		t.Errorf("redirected message was tried %d times", hits["c.redirect"])
	}
}

// TestEndToEndBatchOutcomes: through the real relay and a BatchSender,
// each envelope's result in a batch answer ends as documented: applied
// and duplicate delivered, refused and stale dead with their reason,
// retry retried (Retry-After honoured) until applied; each applied once.
func TestEndToEndBatchOutcomes(t *testing.T) {
	drv, pool, schema := pg(t)
	ctx := context.Background()
	inbox, record := newBilling(t, drv, pool, schema)
	// Every message of this consumer is older than its window.
	staleInbox, err := mensageria.NewInbox(drv, mensageria.InboxConfig{Consumer: "archive", Window: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	// Applied before the relay runs: the delivery of the same document is
	// a duplicate, that of another one under the same key a conflict.
	for key, payload := range map[string]string{"k-dup": ` { } `, "k-conflict": `{"total":1}`} {
		if _, err := inbox.Apply(ctx, &mensageria.Delivery{ID: uuid.Must(uuid.NewV7()), Key: key, Payload: json.RawMessage(payload), CreatedAt: time.Now()},
			func(context.Context, mensageria.Tx, *mensageria.Delivery) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// An effect may run more than once per attempt (ApplyBatch re-runs a
	// failed batch's effects one by one), so outcomes go by attempt.
	var mu sync.Mutex
	tries := map[string]map[int]time.Time{}
	effect := func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
		mu.Lock()
		if tries[d.Key] == nil {
			tries[d.Key] = map[int]time.Time{}
		}
		if _, ok := tries[d.Key][d.Attempt]; !ok {
			tries[d.Key][d.Attempt] = time.Now()
		}
		mu.Unlock()
		switch {
		case d.Key == "k-perm":
			return mensageria.Permanent(errors.New("no such order"))
		case d.Key == "k-later" && d.Attempt == 1:
			return mensageria.RetryAfter(errors.New("busy"), time.Second)
		case d.Key == "k-fail" && d.Attempt <= 2:
			return errors.New("db down")
		}
		return record(ctx, tx, d)
	}
	rc, err := NewReceiver(ReceiverConfig{
		Tokens: []string{"new-token"},
		Handlers: map[string]Handler{
			"b.mixed": {Inbox: inbox, Effect: effect},
			"b.stale": {Inbox: staleInbox, Effect: effect},
		},
		Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var requests atomic.Int64
	checked := conforms(t, rc)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != ContentTypeBatch {
			t.Errorf("not a batch request: %v", r.Header)
		}
		requests.Add(1)
		checked.ServeHTTP(w, r)
	}))
	defer srv.Close()
	var hook retries
	client := startRelayWith(t, drv, map[string]string{"b.mixed": srv.URL, "b.stale": srv.URL, "b.unknown": srv.URL}, true, 4*time.Second, func(c *mensageria.Config) {
		c.BackoffMax = 5 * time.Second
		c.Hooks = []mensageria.Hook{&hook}
	})
	var msgs []mensageria.Message
	for _, k := range []string{"k-ok", "k-dup", "k-conflict", "k-perm", "k-later", "k-fail"} {
		msgs = append(msgs, mensageria.Message{Type: "b.mixed", Key: k, Payload: []byte(`{}`)})
	}
	msgs = append(msgs, mensageria.Message{Type: "b.stale", Key: "k-stale"}, mensageria.Message{Type: "b.unknown", Key: "k-unknown"})
	if _, err := client.Enqueue(ctx, msgs...); err != nil {
		t.Fatal(err)
	}
	mensageriatest.Eventually(t, 30*time.Second, func() bool {
		return count(t, pool, "SELECT count(*) FROM "+schema+".outbox WHERE state = 'pending'") == 0
	}, "every message to settle")
	want := map[string]struct {
		state    string
		attempts int
		reason   string // of a dead message; a delivered one's is cleared
		effects  int
	}{
		"k-ok":       {"delivered", 1, "", 1},
		"k-dup":      {"delivered", 1, "", 0},
		"k-conflict": {"dead", 1, "http 409 Conflict: Conflicting message under an applied dedup key: message ", 0},
		"k-perm":     {"dead", 1, "http 422 Unprocessable Entity: Message refused: no such order", 0},
		"k-later":    {"delivered", 2, "", 1},
		"k-fail":     {"delivered", 3, "", 1},
		"k-stale":    {"dead", 1, "http 409 Conflict: Message older than the dedup window", 0},
		"k-unknown":  {"dead", 1, `http 422 Unprocessable Entity: Unknown message type: this receiver takes no messages of type "b.unknown"`, 0},
	}
	rows, err := pool.Query(ctx, "SELECT key, state, attempts, coalesce(last_error, '') FROM "+schema+".outbox")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][3]string{}
	for rows.Next() {
		var key, state, lastErr string
		var attempts int
		if err := rows.Scan(&key, &state, &attempts, &lastErr); err != nil {
			t.Fatal(err)
		}
		got[key] = [3]string{state, fmt.Sprint(attempts), lastErr}
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	for key, w := range want {
		g := got[key]
		if g[0] != w.state || g[1] != fmt.Sprint(w.attempts) || !strings.Contains(g[2], w.reason) {
			t.Errorf("%s: %s after %s attempts (%q); want %s after %d with %q", key, g[0], g[1], g[2], w.state, w.attempts, w.reason)
		}
		if n := count(t, pool, "SELECT count(*) FROM "+schema+".effects WHERE key = $1", key); n != w.effects {
			t.Errorf("%s: applied %d times, want %d", key, n, w.effects)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("%d outbox rows, want %d", len(got), len(want))
	}
	// A dead letter names who answered: the app and the receiver's URL.
	var route string
	if err := pool.QueryRow(ctx, "SELECT coalesce(last_route, '') FROM "+schema+".outbox WHERE key = 'k-conflict'").Scan(&route); err != nil {
		t.Fatal(err)
	}
	if want := "orders → http " + srv.URL; route != want {
		t.Errorf("the conflict's dead letter names route %q, want %q", route, want)
	}
	hook.mu.Lock()
	if hook.n != 3 {
		t.Errorf("relay reported %d retries, want 3 (k-later once, k-fail twice)", hook.n)
	}
	hook.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if l := tries["k-later"]; len(l) < 2 || l[2].Sub(l[1]) < 900*time.Millisecond {
		t.Errorf("Retry-After of 1s not honoured: tries at %v", l)
	}
	t.Logf("%d batch requests", requests.Load())
}
