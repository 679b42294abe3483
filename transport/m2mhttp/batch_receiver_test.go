package m2mhttp

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/internal/m2mattack"
)

var batchHeader = map[string]string{"Authorization": "Bearer new-token", "Content-Type": ContentTypeBatch}

func batchOf(envs ...string) string { return `{"messages":[` + strings.Join(envs, ",") + `]}` }

func batchResults(t *testing.T, a answer) []BatchResult {
	t.Helper()
	if a.status != 200 || a.header.Get("Content-Type") != ContentTypeBatch {
		t.Fatalf("batch answer %d %v %s", a.status, a.header, a.body)
	}
	var r batchAnswer
	if err := json.Unmarshal(a.body, &r); err != nil {
		t.Fatalf("batch answer %s: %v", a.body, err)
	}
	return r.Results
}

func envelopeOf(typ, key string, created time.Time) (string, string) {
	id := uuid.Must(uuid.NewV7())
	b, _ := EncodeEnvelope(&mensageria.Delivery{ID: id, Type: typ, Key: key, Payload: json.RawMessage(`{}`), CreatedAt: created, Attempt: 1,
		Headers: map[string]string{mensageria.HeaderRequestID: "rid-" + key}})
	return string(b), id.String()
}

// TestReceiverBatchRefusesBadInput: a malformed batch body, too many
// envelopes, an oversize body, a wrong token or media type refuse the
// request whole and store nothing; inside a well-formed batch, malformed
// and unknown-type envelopes are refused one by one and the rest applied.
func TestReceiverBatchRefusesBadInput(t *testing.T) {
	f := newReceiverFixture(t, 0, func(c *ReceiverConfig) { c.MaxBodyBytes = 8192; c.MaxBatchItems = 3 })
	good, _ := envelopeOf("order.closed", "k-1", time.Now())
	for _, c := range m2mattack.Batch(good, "new-token", 8192, 3) {
		t.Run(c.Name, func(t *testing.T) {
			method, header, body := c.Request("new-token")
			a := send(t, method, f.url, header, body)
			if a.status != c.Status || a.problem.Type != c.Problem || a.problem.Status != c.Status {
				t.Fatalf("got %d %s, want %d %s", a.status, a.body, c.Status, c.Problem)
			}
		})
	}
	if n := f.count("SELECT count(*) FROM {s}.inbox") + f.count("SELECT count(*) FROM {s}.effects"); n != 0 || f.applied.Load() != 0 {
		t.Fatalf("refused batches stored %d rows, ran the effect %d times", n, f.applied.Load())
	}

	// Mixed: one good, one malformed (with a readable id), one of an
	// unknown type.
	bad, badID := envelopeOf("order.closed", "k-2", time.Now())
	bad = strings.Replace(bad, `"attempt":1`, `"attempt":0`, 1)
	unknown, unknownID := envelopeOf("invoice.paid", "k-3", time.Now())
	ge, _ := DecodeEnvelope([]byte(good))
	goodID := ge.ID.String()
	rs := batchResults(t, post(t, f.url, batchHeader, batchOf(good, bad, unknown)))
	want := []struct{ id, status, problem string }{
		{goodID, ItemApplied, ""},
		{badID, ItemRefused, ProblemMalformed},
		{unknownID, ItemRefused, ProblemUnknownType},
	}
	for i, w := range want {
		r := rs[i]
		pt := ""
		if r.Problem != nil {
			pt = r.Problem.Type
		}
		if r.ID != w.id || r.Status != w.status || pt != w.problem {
			t.Errorf("result %d: %+v %+v, want %+v", i, r, r.Problem, w)
		}
	}
	if n := f.count("SELECT count(*) FROM {s}.effects"); n != 1 {
		t.Errorf("%d effects, want the good envelope's only", n)
	}
	if n := f.count("SELECT count(*) FROM {s}.inbox"); n != 1 {
		t.Errorf("%d inbox records, want the good envelope's only", n)
	}
	if logs := f.logs.String(); strings.Contains(logs, "new-token") {
		t.Errorf("a token reached the logs:\n%s", logs)
	}
}

// TestReceiverBatchOutcomes: each envelope's effect outcome becomes its
// own result, the good ones are applied once (in one transaction when
// every effect succeeds, each alone after one fails), the request id of
// each envelope reaches its effect, and types are applied through their
// own inboxes.
func TestReceiverBatchOutcomes(t *testing.T) {
	var mu sync.Mutex
	var otherRan []string
	rids := map[string]string{}
	f := newReceiverFixture(t, time.Hour, func(c *ReceiverConfig) {
		// A second type, on an inbox of its own.
		drv, _, _ := pg(t)
		other, err := mensageria.NewInbox(drv, mensageria.InboxConfig{Consumer: "shipping"})
		if err != nil {
			t.Fatal(err)
		}
		c.Handlers["invoice.paid"] = Handler{Inbox: other, Effect: func(ctx context.Context, _ mensageria.Tx, d *mensageria.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			otherRan = append(otherRan, d.Key+"@"+RequestID(ctx))
			return nil
		}}
	})
	f.effect.Store(mensageria.Effect(func(ctx context.Context, _ mensageria.Tx, d *mensageria.Delivery) error {
		mu.Lock()
		rids[d.Key] = RequestID(ctx)
		mu.Unlock()
		switch d.Key {
		case "k-perm":
			return mensageria.Permanent(errors.New("order does not exist"))
		case "k-later":
			return mensageria.RetryAfter(errors.New("busy"), 30*time.Second)
		case "k-fail":
			return errors.New("db down: secret")
		case "k-panic":
			panic("boom")
		}
		return nil
	}))
	now := time.Now()
	var envs []string
	for _, k := range []string{"k-ok", "k-perm", "k-later", "k-fail", "k-panic"} {
		e, _ := envelopeOf("order.closed", k, now)
		envs = append(envs, e)
	}
	stale, _ := envelopeOf("order.closed", "k-old", now.Add(-2*time.Hour))
	inv, _ := envelopeOf("invoice.paid", "k-ok", now) // same key, other consumer
	dupe, _ := envelopeOf("order.closed", "k-ok", now)
	envs = append(envs, stale, inv, dupe)
	rs := batchResults(t, post(t, f.url, batchHeader, batchOf(envs...)))
	want := []struct {
		status, problem string
		code            int
		ra              int64
	}{
		{ItemApplied, "", 0, 0},
		{ItemRefused, ProblemRefused, 422, 0},
		{ItemRetry, ProblemUnavailable, 503, 30},
		{ItemRetry, ProblemInternal, 500, 0},
		{ItemRetry, ProblemInternal, 500, 0},
		{ItemStale, ProblemStale, 409, 0},
		{ItemApplied, "", 0, 0},
		{ItemDuplicate, "", 0, 0},
	}
	for i, w := range want {
		r := rs[i]
		var pt string
		var code int
		if r.Problem != nil {
			pt, code = r.Problem.Type, r.Problem.Status
		}
		if r.Status != w.status || pt != w.problem || code != w.code || r.RetryAfter != w.ra {
			t.Errorf("result %d: %+v %+v, want %+v", i, r, r.Problem, w)
		}
	}
	if strings.Contains(rs[3].Problem.Detail, "secret") {
		t.Errorf("internal error text leaked to the peer: %+v", rs[3].Problem)
	}
	if !strings.Contains(rs[1].Problem.Detail, "order does not exist") || rs[1].Problem.RequestID != "rid-k-perm" {
		t.Errorf("refusal lacks its reason or request id: %+v", rs[1].Problem)
	}
	mu.Lock()
	defer mu.Unlock()
	if rids["k-ok"] != "rid-k-ok" || len(otherRan) != 1 || otherRan[0] != "k-ok@rid-k-ok" {
		t.Errorf("request ids in the effects: %v %v", rids, otherRan)
	}
	if n := f.count("SELECT count(*) FROM {s}.effects"); n != 1 {
		t.Errorf("%d effects of order.closed, want 1", n)
	}
	if logs := f.logs.String(); !strings.Contains(logs, "effect panicked") || !strings.Contains(logs, `"batch_request_id":"test-rid"`) {
		t.Errorf("logs lack the panic or the batch request id:\n%s", logs)
	}

	// Redelivered once the effects succeed: the retried ones apply now,
	// the applied one is a duplicate.
	f.effect.Store(mensageria.Effect(nil))
	rs = batchResults(t, post(t, f.url, batchHeader, batchOf(envs[:5]...)))
	for i, w := range []string{ItemDuplicate, ItemApplied, ItemApplied, ItemApplied, ItemApplied} {
		if rs[i].Status != w {
			t.Errorf("redelivery result %d: %+v, want %s", i, rs[i], w)
		}
	}
	if n := f.count("SELECT count(*) FROM {s}.effects"); n != 5 {
		t.Errorf("%d effects after redelivery, want 5", n)
	}
	if n := f.count("SELECT count(*) FROM {s}.effects WHERE key = 'k-old'"); n != 0 {
		t.Error("stale message applied")
	}
}
