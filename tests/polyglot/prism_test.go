package polyglot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
	"github.com/xadm/mensageria/driver/postgres"
	"github.com/xadm/mensageria/internal/testdb"
	"github.com/xadm/mensageria/mensageriatest"
	"github.com/xadm/mensageria/transport/m2mhttp"
)

// Prism (@stoplight/prism-cli, installed into tools/ by scripts/polyglot.sh)
// is a contract tool that knows nothing of mensageria: it reads
// docs/openapi.yaml and validates what goes through it. With --errors a
// violation is not only reported (the sl-violations header) but answered:
// 422 for a request that breaks the document, 500 for a response.

// startPrism runs `prism <mode> docs/openapi.yaml [upstream]` on a free
// loopback port and returns its base URL once it listens.
func startPrism(t *testing.T, mode string, upstream ...string) string {
	t.Helper()
	need(t, "Node.js", "node")
	prism := need(t, "Prism", filepath.Join(root, "tools/node_modules/.bin/prism"))
	doc, err := filepath.Abs(filepath.Join(root, "docs/openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	args := append([]string{mode, doc}, upstream...)
	args = append(args, "-h", "127.0.0.1", "-p", fmt.Sprint(port), "--errors")
	p := start(t, "prism "+mode, t.TempDir(), []string{"SCARF_ANALYTICS=false"}, prism, args...)
	mensageriatest.Eventually(t, 3*time.Minute, func() bool {
		select {
		case <-p.done:
			t.Fatalf("prism %s exited %d:\n%s", mode, p.code, p.out.String())
		default:
		}
		return strings.Contains(p.out.String(), "Prism is listening")
	}, "prism "+mode+" to listen")
	return fmt.Sprintf("http://127.0.0.1:%d", port)
}

// exchange is one answer as the sender's client saw it.
type exchange struct {
	status     int
	violations string
	problem    string // the problem document's type, when it is one
}

// recorder is the senders' transport: it keeps every answer.
type recorder struct {
	mu  sync.Mutex
	got []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	var p struct {
		Type string `json:"type"`
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		_ = json.Unmarshal(body, &p)
	}
	r.mu.Lock()
	r.got = append(r.got, exchange{status: resp.StatusCode, violations: resp.Header.Get("sl-violations"), problem: p.Type})
	r.mu.Unlock()
	return resp, nil
}

// last returns the answer to the last request and forgets every one.
func (r *recorder) last(t *testing.T) exchange {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) == 0 {
		t.Fatal("no exchange recorded")
	}
	e := r.got[len(r.got)-1]
	r.got = nil
	return e
}

func delivery(typ, key, payload string, headers map[string]string) *mensageria.Delivery {
	return &mensageria.Delivery{ID: uuid.Must(uuid.NewV7()), Type: typ, Key: key, Payload: json.RawMessage(payload),
		Headers: headers, CreatedAt: time.Now().UTC(), Attempt: 1}
}

// The deliveries the senders make in these tests: ASCII and multi-byte
// keys (a key of 1,000 bytes, repeated as Idempotency-Key; one of 500
// two-byte characters, which is not), headers, nested payloads, a later
// attempt.
func senderDeliveries(typ string) []*mensageria.Delivery {
	ds := []*mensageria.Delivery{
		delivery(typ, "pedido-1", `{"id": 1, "items": [{"sku": "A-1", "qty": 2}], "total": "10.50"}`, nil),
		delivery(typ, strings.Repeat("k", 1000), `[1, 2, 3]`, map[string]string{"X-Request-Id": "req-2"}),
		delivery(typ, strings.Repeat("é", 500), `"a string"`, map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}),
		delivery(typ, "pedido-4", `{"nested": {"deep": [null, true, 1.5e3]}}`, map[string]string{"tenant": "açaí"}),
	}
	ds[3].Attempt = 7
	return ds
}

func newSenders(t *testing.T, url, token string, rec *recorder) (*m2mhttp.Sender, *m2mhttp.BatchSender) {
	t.Helper()
	cfg := m2mhttp.SenderConfig{URL: url, Token: token, Timeout: 30 * time.Second, Client: &http.Client{Transport: rec}}
	s, err := m2mhttp.NewSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m2mhttp.NewBatchSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

// post sends a hand-made request, for what no mensageria sender sends.
func post(t *testing.T, url, token, contentType, body string) exchange {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Request-Id", "hand-made")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := &recorder{}
	resp, err := rec.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return rec.last(t)
}

const prismInvalid = "https://stoplight.io/prism/errors#UNPROCESSABLE_ENTITY"

func envelope(attempt int, extra string) string {
	return fmt.Sprintf(`{"id":%q,"type":"pedido.criado","key":"k","created_at":"2026-11-30T12:00:00Z","attempt":%d,"payload":{}%s}`,
		uuid.Must(uuid.NewV7()).String(), attempt, extra)
}

// A receiver mocked by Prism from docs/openapi.yaml alone takes every
// request the Go Sender and BatchSender make, and refuses the ones that
// break the document, so its acceptance means something.
func TestPrismMockTakesTheSendersRequests(t *testing.T) {
	base := startPrism(t, "mock")
	rec := &recorder{}
	single, batch := newSenders(t, base+"/", "any-token", rec)
	ctx := context.Background()
	for _, d := range senderDeliveries("pedido.criado") {
		if err := single.Send(ctx, d); err != nil {
			t.Errorf("Send of key %.20q to the mock: %v", d.Key, err)
		}
		if e := rec.last(t); e.status != http.StatusOK || e.violations != "" {
			t.Errorf("the mock answered the Sender's request for key %.20q with %d, violations %s", d.Key, e.status, e.violations)
		}
	}
	// The mock's answer to a batch is the document's example (two
	// results), whatever was sent: only its acceptance of the request is
	// looked at.
	_ = batch.SendBatch(ctx, senderDeliveries("pedido.criado"))
	if e := rec.last(t); e.status != http.StatusOK || e.violations != "" {
		t.Errorf("the mock answered the BatchSender's request with %d, violations %s", e.status, e.violations)
	}

	for _, c := range []struct {
		what, token, contentType, body string
		status                         int
	}{
		{"attempt 0", "t", "application/json", envelope(0, ""), http.StatusUnprocessableEntity},
		{"an unknown field", "t", "application/json", envelope(1, `,"extra":1`), http.StatusUnprocessableEntity},
		{"headers of numbers", "t", "application/json", envelope(1, `,"headers":{"n":1}`), http.StatusUnprocessableEntity},
		{"an empty batch", "t", m2mhttp.ContentTypeBatch, `{"messages":[]}`, http.StatusUnprocessableEntity},
		{"a batch with a bad envelope", "t", m2mhttp.ContentTypeBatch, `{"messages":[` + envelope(0, "") + `]}`, http.StatusUnprocessableEntity},
		{"no token", "", "application/json", envelope(1, ""), http.StatusUnauthorized},
	} {
		e := post(t, base+"/", c.token, c.contentType, c.body)
		if e.status != c.status || e.violations == "" {
			t.Errorf("%s: the mock answered %d, violations %q; want %d with the violation named", c.what, e.status, e.violations, c.status)
		}
	}
}

// Prism as a validating proxy between the Go senders and the real
// m2mhttp.Receiver on PostgreSQL: every request the senders make and every
// answer the receiver gives (applied, duplicate, conflict, unknown type, a
// refusal, a retry with Retry-After, a bad token, a batch of mixed results)
// conforms to docs/openapi.yaml, and the senders read each answer as the
// document says. An answer that breaks the document is caught.
func TestPrismProxyBetweenSenderAndReceiver(t *testing.T) {
	pool := testdb.Pool(t)
	schema := testdb.Schema(t)
	ctx := context.Background()
	drv, err := postgres.New(pool, &postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drv.Migrate(ctx, driver.MigrateParams{Mode: driver.MigrateUp}); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".effects (key text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	inbox, err := mensageria.NewInbox(drv, mensageria.InboxConfig{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	apply := func(ctx context.Context, tx mensageria.Tx, d *mensageria.Delivery) error {
		_, err := tx.Raw().(pgx.Tx).Exec(ctx, "INSERT INTO "+schema+".effects (key) VALUES ($1)", d.Key)
		return err
	}
	rc, err := m2mhttp.NewReceiver(m2mhttp.ReceiverConfig{
		Tokens: []string{"good-token"},
		Handlers: map[string]m2mhttp.Handler{
			"pedido.criado": {Inbox: inbox, Effect: apply},
			"pedido.recusado": {Inbox: inbox, Effect: func(context.Context, mensageria.Tx, *mensageria.Delivery) error {
				return mensageria.Permanent(errors.New("this order cannot be invoiced"))
			}},
			"pedido.depois": {Inbox: inbox, Effect: func(context.Context, mensageria.Tx, *mensageria.Delivery) error {
				return mensageria.RetryAfter(errors.New("invoicing is paused"), 30*time.Second)
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	// The token "off-contract" reaches a handler that answers what the
	// document does not allow, to see the proxy catch it.
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer off-contract" {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"status":"probably"}`))
			return
		}
		rc.ServeHTTP(w, r)
	}))
	defer upstream.Close()
	base := startPrism(t, "proxy", upstream.URL)
	rec := &recorder{}
	single, batch := newSenders(t, base+"/", "good-token", rec)

	conforming := func(what string, want int) exchange {
		t.Helper()
		e := rec.last(t)
		if e.violations != "" || e.status != want {
			t.Errorf("%s: %d through the proxy, violations %s; want %d conforming", what, e.status, e.violations, want)
		}
		return e
	}
	ds := senderDeliveries("pedido.criado")
	for _, d := range ds {
		if err := single.Send(ctx, d); err != nil {
			t.Errorf("Send of key %.20q: %v", d.Key, err)
		}
		conforming("a new message", http.StatusOK)
		if err := single.Send(ctx, d); err != nil {
			t.Errorf("the redelivery of key %.20q: %v", d.Key, err)
		}
		conforming("a redelivery (duplicate)", http.StatusOK)
	}
	other := delivery("pedido.criado", ds[0].Key, `{"id": 1, "total": "99.99"}`, nil)
	if err := single.Send(ctx, other); !mensageria.IsPermanent(err) {
		t.Errorf("the same key with another payload: %v, want a permanent refusal", err)
	}
	if e := conforming("a conflict", http.StatusConflict); !strings.HasSuffix(e.problem, "/conflict") {
		t.Errorf("the conflict's problem type is %q", e.problem)
	}
	for _, c := range []struct {
		typ    string
		status int
	}{{"pedido.desconhecido", http.StatusUnprocessableEntity}, {"pedido.recusado", http.StatusUnprocessableEntity}} {
		if err := single.Send(ctx, delivery(c.typ, "k-"+c.typ, `{}`, nil)); !mensageria.IsPermanent(err) {
			t.Errorf("%s: %v, want a permanent refusal", c.typ, err)
		}
		conforming(c.typ, c.status)
	}
	err = single.Send(ctx, delivery("pedido.depois", "k-later", `{}`, nil))
	if after, ok := mensageria.RetryAfterOf(err); !ok || after != 30*time.Second {
		t.Errorf("a paused effect: %v, want a retry after 30s", err)
	}
	conforming("a retry later", http.StatusServiceUnavailable)

	errs := batch.SendBatch(ctx, []*mensageria.Delivery{
		delivery("pedido.criado", "batch-new", `{"n": 1}`, map[string]string{"X-Request-Id": "b-1"}),
		ds[1], // applied before: a duplicate
		delivery("pedido.desconhecido", "batch-unknown", `{}`, nil),
		delivery("pedido.depois", "batch-later", `{}`, nil),
	})
	conforming("a batch", http.StatusOK)
	if errs[0] != nil || errs[1] != nil || !mensageria.IsPermanent(errs[2]) {
		t.Errorf("batch outcomes %v; want delivered, delivered, refused, retried", errs)
	}
	if _, ok := mensageria.RetryAfterOf(errs[3]); !ok {
		t.Errorf("batch outcome of the paused effect: %v, want a retry", errs[3])
	}

	bad, _ := newSenders(t, base+"/", "wrong-token", rec)
	// A refused token is the destination's problem (a rotated secret), not
	// the message's: the route pauses, the message keeps its attempt.
	if err := bad.Send(ctx, delivery("pedido.criado", "k-auth", `{}`, nil)); !mensageria.IsUnavailable(err) || mensageria.IsPermanent(err) {
		t.Errorf("a wrong token: %v, want a destination-level failure (Unavailable), not a permanent one", err)
	}
	conforming("a wrong token", http.StatusUnauthorized)

	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".effects").Scan(&n); err != nil || n != len(ds)+1 {
		t.Errorf("%d effects applied (%v), want %d: each new message once, nothing else", n, err, len(ds)+1)
	}

	// The controls: the proxy stops a request that breaks the document
	// before the receiver, and flags an answer that breaks it.
	if e := post(t, base+"/", "good-token", "application/json", envelope(0, "")); e.status != http.StatusUnprocessableEntity || e.problem != prismInvalid {
		t.Errorf("attempt 0 through the proxy: %d %q, want Prism's own 422", e.status, e.problem)
	}
	if e := post(t, base+"/", "off-contract", "application/json", envelope(1, "")); e.status != http.StatusInternalServerError || !strings.Contains(e.violations, "status") {
		t.Errorf("an answer of status \"probably\": %d, violations %q; want Prism's 500 naming the field", e.status, e.violations)
	}
}
