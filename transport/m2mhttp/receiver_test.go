package m2mhttp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/internal/m2mattack"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type receiverFixture struct {
	url     string
	rc      *Receiver
	logs    *syncBuffer
	applied atomic.Int32
	effect  atomic.Value // mensageria.Effect override
	schema  string
	count   func(sql string) int
	lastRID atomic.Value
}

// newReceiverFixture serves a Receiver for type "order.closed" whose
// effect inserts the key into <schema>.effects, checked against the
// contract on every exchange.
func newReceiverFixture(t *testing.T, window time.Duration, mutate func(*ReceiverConfig)) *receiverFixture {
	drv, pool, schema := pg(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".effects (key text NOT NULL, payload text)"); err != nil {
		t.Fatal(err)
	}
	f := &receiverFixture{logs: &syncBuffer{}, schema: schema}
	f.count = func(sql string) int { return count(t, pool, strings.ReplaceAll(sql, "{s}", schema)) }
	inbox, err := mensageria.NewInbox(drv, mensageria.InboxConfig{Consumer: "billing", Window: window})
	if err != nil {
		t.Fatal(err)
	}
	effect := func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
		f.lastRID.Store(RequestID(ctx))
		Logger(ctx).InfoContext(ctx, "effect ran")
		if e, ok := f.effect.Load().(mensageria.Effect); ok && e != nil {
			if err := e(ctx, tx, d); err != nil {
				return err
			}
		}
		_, err := tx.Raw().(pgx.Tx).Exec(ctx, "INSERT INTO "+schema+".effects (key, payload) VALUES ($1, $2)", d.Key, string(d.Payload))
		if err == nil {
			f.applied.Add(1)
		}
		return err
	}
	cfg := ReceiverConfig{
		Tokens:   []string{"old-token", "new-token"},
		Handlers: map[string]Handler{"order.closed": {Inbox: inbox, Effect: effect}},
		Logger:   slog.New(slog.NewJSONHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	rc, err := NewReceiver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(conforms(t, rc))
	t.Cleanup(srv.Close)
	f.url, f.rc = srv.URL+"/m2m", rc
	return f
}

type answer struct {
	status  int
	header  http.Header
	body    []byte
	problem Problem
}

func post(t *testing.T, url string, header map[string]string, body string) answer {
	t.Helper()
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("X-Request-Id", "test-rid") // the contract requires it of senders
	for k, v := range header {
		if v == "" {
			h.Del(k)
		} else {
			h.Set(k, v)
		}
	}
	return send(t, http.MethodPost, url, h, body)
}

// send makes one request with exactly these headers.
func send(t *testing.T, method, url string, header http.Header, body string) answer {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header = header
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	a.status, a.header = resp.StatusCode, resp.Header
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	a.body = buf.Bytes()
	if strings.HasPrefix(resp.Header.Get("Content-Type"), contentTypeProblem) {
		if err := json.Unmarshal(a.body, &a.problem); err != nil {
			t.Fatalf("problem body %s: %v", a.body, err)
		}
	}
	return a
}

func envelopeFor(key string, created time.Time, payload string) string {
	b, _ := EncodeEnvelope(&mensageria.Delivery{
		ID: uuid.Must(uuid.NewV7()), Type: "order.closed", Key: key,
		Payload: json.RawMessage(payload), CreatedAt: created, Attempt: 1,
	})
	return string(b)
}

var auth = map[string]string{"Authorization": "Bearer new-token"}

// TestReceiverRefusesBadInput: each kind of bad request gets its
// documented problem answer, and nothing reaches the inbox or the effect.
func TestReceiverRefusesBadInput(t *testing.T) {
	f := newReceiverFixture(t, 0, func(c *ReceiverConfig) { c.MaxBodyBytes = 4096 })
	good := envelopeFor("k-1", time.Now(), `{"n":1}`)
	for _, c := range m2mattack.Single(good, "order.closed", "k-1", "new-token", 4096) {
		t.Run(c.Name, func(t *testing.T) {
			method, header, body := c.Request("new-token")
			a := send(t, method, f.url, header, body)
			if a.status != c.Status || a.problem.Type != c.Problem || a.problem.Status != c.Status || a.problem.Title == "" {
				t.Fatalf("got %d %s, want %d %s", a.status, a.body, c.Status, c.Problem)
			}
			if c.Status == 401 && !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer ") {
				t.Errorf("401 without a Bearer challenge: %v", a.header)
			}
			if c.Status == 405 && a.header.Get("Allow") != "POST" {
				t.Errorf("405 without Allow: POST: %v", a.header)
			}
		})
	}
	if n := f.count("SELECT count(*) FROM {s}.inbox") + f.count("SELECT count(*) FROM {s}.effects"); n != 0 || f.applied.Load() != 0 {
		t.Fatalf("bad input stored %d rows, ran the effect %d times", n, f.applied.Load())
	}
	if logs := f.logs.String(); strings.Contains(logs, "new-token") || strings.Contains(logs, "bmV3LXRva2Vu") {
		t.Errorf("a token reached the logs:\n%s", logs)
	}
}

// TestReceiverAppliesOnce: applied, then duplicate; both tokens of a
// rotation work; the request id reaches the effect's context and logs;
// neither token nor payload is logged.
func TestReceiverAppliesOnce(t *testing.T) {
	f := newReceiverFixture(t, 0, nil)
	body := envelopeFor("order-7", time.Now(), `{"secret":"cpf-123"}`)
	a := post(t, f.url, map[string]string{"Authorization": "Bearer old-token", "X-Request-Id": "rid-1"}, body)
	if a.status != 200 || string(a.body) != `{"status":"applied"}` {
		t.Fatalf("first: %d %s", a.status, a.body)
	}
	if got := f.lastRID.Load(); got != "rid-1" {
		t.Errorf("RequestID in the effect = %v", got)
	}
	for range 3 {
		a = post(t, f.url, auth, body)
		if a.status != 200 || string(a.body) != `{"status":"duplicate"}` {
			t.Fatalf("repeat: %d %s", a.status, a.body)
		}
	}
	// A new message of the same natural key and document is a duplicate
	// as well; with another document it is a conflict, refused.
	a = post(t, f.url, auth, envelopeFor("order-7", time.Now(), `{"secret": "cpf-123"}`))
	if string(a.body) != `{"status":"duplicate"}` {
		t.Fatalf("same key and payload, new id: %s", a.body)
	}
	a = post(t, f.url, auth, envelopeFor("order-7", time.Now(), `{}`))
	if a.status != 409 || a.problem.Type != ProblemConflict || f.rc.Conflicts() != 1 {
		t.Fatalf("same key, another payload: %d %s (%d conflicts counted)", a.status, a.body, f.rc.Conflicts())
	}
	if n := f.count("SELECT count(*) FROM {s}.effects"); n != 1 {
		t.Fatalf("effect applied %d times", n)
	}
	logs := f.logs.String()
	if !strings.Contains(logs, `"msg":"effect ran"`) || !strings.Contains(logs, `"request_id":"rid-1"`) {
		t.Errorf("the effect's log line lacks the request id:\n%s", logs)
	}
	for _, secret := range []string{"old-token", "new-token", "cpf-123"} {
		if strings.Contains(logs, secret) {
			t.Errorf("%q reached the logs:\n%s", secret, logs)
		}
	}
}

// TestReceiverEffectOutcomes: panics and errors roll back and answer as
// documented; the next delivery then applies.
func TestReceiverEffectOutcomes(t *testing.T) {
	f := newReceiverFixture(t, time.Hour, nil)
	cases := []struct {
		name    string
		effect  mensageria.Effect
		status  int
		problem string
		ra      string
	}{
		{"panic", func(context.Context, mensageria.Tx, *mensageria.Delivery) error { panic("boom") }, 500, ProblemInternal, ""},
		{"error", func(context.Context, mensageria.Tx, *mensageria.Delivery) error { return errors.New("db down: secret") }, 500, ProblemInternal, ""},
		{"permanent", func(context.Context, mensageria.Tx, *mensageria.Delivery) error {
			return mensageria.Permanent(errors.New("order does not exist"))
		}, 422, ProblemRefused, ""},
		{"retry after", func(context.Context, mensageria.Tx, *mensageria.Delivery) error {
			return mensageria.RetryAfter(errors.New("busy"), 30*time.Second)
		}, 503, ProblemUnavailable, "30"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f.effect.Store(c.effect)
			body := envelopeFor(fmt.Sprintf("k-%d", i), time.Now(), `{"secret":"cpf-123"}`)
			a := post(t, f.url, auth, body)
			if a.status != c.status || a.problem.Type != c.problem || a.header.Get("Retry-After") != c.ra {
				t.Fatalf("got %d %v %s", a.status, a.header, a.body)
			}
			if c.name == "permanent" && !strings.Contains(a.problem.Detail, "order does not exist") {
				t.Errorf("permanent refusal lacks its reason: %s", a.body)
			}
			if strings.Contains(string(a.body), "secret") {
				t.Errorf("internal error text leaked to the peer: %s", a.body)
			}
			f.effect.Store(mensageria.Effect(nil))
			if a = post(t, f.url, auth, body); string(a.body) != `{"status":"applied"}` {
				t.Fatalf("after rollback, redelivery: %d %s", a.status, a.body)
			}
		})
	}
	if n := f.count("SELECT count(*) FROM {s}.effects"); n != len(cases) {
		t.Fatalf("%d effects, want %d", n, len(cases))
	}
	logs := f.logs.String()
	if !strings.Contains(logs, "effect panicked") || strings.Contains(logs, "cpf-123") {
		t.Errorf("panic log missing or payload logged:\n%s", logs)
	}

	// Older than the window: refused with 409, not applied.
	a := post(t, f.url, auth, envelopeFor("k-old", time.Now().Add(-2*time.Hour), `{}`))
	if a.status != 409 || a.problem.Type != ProblemStale {
		t.Fatalf("stale: %d %s", a.status, a.body)
	}
	if n := f.count("SELECT count(*) FROM {s}.effects WHERE key = 'k-old'"); n != 0 {
		t.Fatal("stale message applied")
	}
}

func TestReceiverLogPayloadsOptIn(t *testing.T) {
	f := newReceiverFixture(t, 0, func(c *ReceiverConfig) { c.LogPayloads = true })
	f.effect.Store(mensageria.Effect(func(context.Context, mensageria.Tx, *mensageria.Delivery) error { return errors.New("x") }))
	post(t, f.url, auth, envelopeFor("k", time.Now(), `{"visible":"yes"}`))
	if !strings.Contains(f.logs.String(), "visible") {
		t.Errorf("LogPayloads did not log the payload:\n%s", f.logs.String())
	}
}

// Over MaxInFlight a request is shed with 503 and a Retry-After, single
// or batch, while the one holding the slot completes.
func TestReceiverSheds(t *testing.T) {
	single := func(key string) string { return envelopeFor(key, time.Now(), `{}`) }
	batch := func(key string) string {
		e, _ := envelopeOf("order.closed", key, time.Now())
		return batchOf(e)
	}
	for _, tc := range []struct {
		name   string
		header map[string]string
		body   func(key string) string
		check  func(t *testing.T, a answer)
	}{
		{"single", auth, single, func(t *testing.T, a answer) {
			if a.status != 200 {
				t.Fatalf("first: %d %s", a.status, a.body)
			}
		}},
		{"batch", batchHeader, batch, func(t *testing.T, a answer) {
			if rs := batchResults(t, a); rs[0].Status != ItemApplied {
				t.Fatalf("first: %+v", rs)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newReceiverFixture(t, 0, func(c *ReceiverConfig) { c.MaxInFlight = 1 })
			hold, entered := make(chan struct{}), make(chan struct{})
			f.effect.Store(mensageria.Effect(func(context.Context, mensageria.Tx, *mensageria.Delivery) error {
				close(entered)
				<-hold
				return nil
			}))
			done := make(chan answer)
			go func() { done <- post(t, f.url, tc.header, tc.body("k-1")) }()
			<-entered
			a := post(t, f.url, tc.header, tc.body("k-2"))
			close(hold)
			if a.status != 503 || a.header.Get("Retry-After") == "" || a.problem.Type != ProblemOverloaded {
				t.Fatalf("over the limit: %d %v %s", a.status, a.header, a.body)
			}
			tc.check(t, <-done)
		})
	}
}

func TestNewReceiverValidates(t *testing.T) {
	h := map[string]Handler{"t": {Inbox: &mensageria.Inbox{}, Effect: func(context.Context, mensageria.Tx, *mensageria.Delivery) error { return nil }}}
	for _, c := range []ReceiverConfig{
		{Handlers: h},
		{Tokens: []string{""}, Handlers: h},
		{Tokens: []string{"a"}},
		{Tokens: []string{"a"}, Handlers: map[string]Handler{"t": {}}},
		{Tokens: []string{"a"}, Handlers: h, MaxBodyBytes: -1},
	} {
		if _, err := NewReceiver(c); !errors.Is(err, mensageria.ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func TestLogHandlerAddsRequestIDOnce(t *testing.T) {
	var buf syncBuffer
	l := slog.New(NewLogHandler(slog.NewTextHandler(&buf, nil)))
	ctx := context.WithValue(context.Background(), keyRequestID, "rid-9")
	l.InfoContext(ctx, "plain")
	l.With("request_id", "rid-9").InfoContext(ctx, "with")
	l.InfoContext(ctx, "attr", "request_id", "rid-9")
	l.Info("no context")
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, line := range lines[:3] {
		if strings.Count(line, "request_id=rid-9") != 1 {
			t.Errorf("want the request id once: %s", line)
		}
	}
	if strings.Contains(lines[3], "request_id") {
		t.Errorf("no context, no request id: %s", lines[3])
	}
}
