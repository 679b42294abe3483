package m2mhttp

import (
	"context"
	"encoding/json"
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

	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver/postgres"
)

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError}))
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// startRelay runs an app whose registry sends each type to its URL.
// retries counts the relay's retry outcomes and keeps the last error of
// each type.
type retries struct {
	mu   sync.Mutex
	n    int
	last map[string]string
}

func (r *retries) OnDelivery(ev mensageria.DeliveryEvent) {
	if ev.Outcome != mensageria.OutcomeRetry {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	if r.last == nil {
		r.last = map[string]string{}
	}
	r.last[ev.Type] = ev.Err.Error()
}

func startRelay(t *testing.T, drv *postgres.Driver, routes map[string]string, tune func(*mensageria.Config)) *mensageria.Client {
	t.Helper()
	reg := mensageria.NewRegistry()
	for typ, url := range routes {
		s, err := NewSender(SenderConfig{URL: url, Token: "new-token", Timeout: 300 * time.Millisecond})
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

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEndToEndUnreliableReceiver: PostgreSQL outbox → relay → loopback
// HTTP → receiver inbox, with a receiver that randomly fails (503), hangs
// past the sender's timeout, or applies and then drops the connection
// before answering (a lost ack). Every message must be applied exactly
// once and none lost; the redeliveries are counted.
func TestEndToEndUnreliableReceiver(t *testing.T) {
	const n = 300
	drv, pool, schema := pg(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".effects (key text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	inbox, err := mensageria.NewInbox(drv, mensageria.InboxConfig{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := NewReceiver(ReceiverConfig{
		Tokens: []string{"new-token"},
		Handlers: map[string]Handler{"order.closed": {Inbox: inbox, Effect: func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
			_, err := tx.Raw().(pgx.Tx).Exec(ctx, "INSERT INTO "+schema+".effects (key) VALUES ($1)", d.Key)
			return err
		}}},
		Logger: quietLogger(),
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
	client := startRelay(t, drv, map[string]string{"order.closed": srv.URL + "/m2m"}, func(c *mensageria.Config) { c.Hooks = []mensageria.Hook{&hook} })
	msgs := make([]mensageria.Message, 0, n)
	for i := range n {
		msgs = append(msgs, mensageria.Message{Type: "order.closed", Key: fmt.Sprintf("order-%04d", i), Payload: []byte(`{"total":1}`)})
	}
	for i := 0; i < n; i += 50 {
		if _, err := client.Enqueue(ctx, msgs[i:i+50]...); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 90*time.Second, "every message to settle", func() bool {
		return count(t, pool, "SELECT count(*) FROM "+schema+".outbox WHERE state = 'pending'") == 0
	})

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
	redeliveries := count(t, pool, "SELECT coalesce(sum(attempts), 0) - count(*) FROM "+schema+".outbox")
	hook.mu.Lock()
	retried := hook.n
	hook.mu.Unlock()
	// Attempts also count claims whose lease ran out on a loaded machine,
	// which the relay reports as fenced rather than retried.
	if retried > redeliveries {
		t.Errorf("relay reported %d retries, outbox counts only %d redeliveries", retried, redeliveries)
	}
	t.Logf("%d messages: %d redeliveries (%d reported as retries); receiver answered 503 %d, hung %d, lost the ack %d, passed %d; %d duplicates absorbed",
		n, redeliveries, retried, failed.Load(), hung.Load(), lostAck.Load(), passed.Load(), duplicates.Load())
	if redeliveries < int(failed.Load()+hung.Load()+lostAck.Load())/2 || lostAck.Load() == 0 || duplicates.Load() == 0 {
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
	waitFor(t, 30*time.Second, "every message to settle", func() bool {
		return count(t, pool, "SELECT count(*) FROM "+schema+".outbox WHERE state = 'pending'") == 0
	})
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
		"c.throttle": {"delivered", 2, "429"},
		"c.down":     {"delivered", 4, "503"},
		"c.timeout":  {"delivered", 3, "408"},
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
