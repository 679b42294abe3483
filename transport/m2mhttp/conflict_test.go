package m2mhttp

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
)

// A conflict (the dedup key applied by a message with another payload) is
// answered 409 with the conflict problem naming the key and the first
// message, alone or in a batch, counted, and classified by the senders as
// a permanent failure of that message only.
func TestReceiverConflict(t *testing.T) {
	f := newReceiverFixture(t, 0, func(c *ReceiverConfig) {})
	first := uuid.Must(uuid.NewV7())
	f.effect.Store(mensageria.Effect(func(_ context.Context, _ mensageria.Tx, d *mensageria.Delivery) error {
		if strings.HasPrefix(d.Key, "dup-") {
			return &mensageria.ConflictError{Consumer: "billing", Key: d.Key, ID: d.ID, FirstID: first}
		}
		return nil
	}))

	body := envelopeFor("dup-1", time.Now(), `{"total":2}`)
	a := post(t, f.url, auth, body)
	if a.status != http.StatusConflict || a.problem.Type != ProblemConflict || a.problem.Status != http.StatusConflict || a.problem.Title == "" {
		t.Fatalf("conflict answered %d %s", a.status, a.body)
	}
	for _, want := range []string{first.String(), `"dup-1"`} {
		if !strings.Contains(a.problem.Detail, want) {
			t.Errorf("detail %q does not name %s", a.problem.Detail, want)
		}
	}
	rs := batchResults(t, post(t, f.url, batchHeader, batchOf(envelopeFor("k-1", time.Now(), `{}`), envelopeFor("dup-2", time.Now(), `{}`))))
	if rs[0].Status != ItemApplied || rs[1].Status != ItemRefused || rs[1].Problem == nil ||
		rs[1].Problem.Type != ProblemConflict || rs[1].Problem.Status != http.StatusConflict || !strings.Contains(rs[1].Problem.Detail, first.String()) {
		t.Fatalf("batch results %+v %+v", rs[0], rs[1].Problem)
	}

	// The senders' reading of those answers: that message dead, with the
	// detail; its neighbour delivered.
	cfg := SenderConfig{URL: f.url, Token: "new-token"}
	single, err := NewSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := NewBatchSender(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dup := testDelivery()
	dup.Key = "dup-3"
	var se *StatusError
	if err := single.Send(context.Background(), dup); !mensageria.IsPermanent(err) || !errors.As(err, &se) || se.StatusCode != 409 || !strings.Contains(err.Error(), first.String()) {
		t.Fatalf("the sender classifies the conflict as %v", err)
	}
	ok := testDelivery()
	ok.Key = "k-2"
	errs := batch.SendBatch(context.Background(), []*mensageria.Delivery{ok, dup})
	if errs[0] != nil || !mensageria.IsPermanent(errs[1]) || !errors.As(errs[1], &se) || se.StatusCode != 409 {
		t.Fatalf("the batch sender classifies the batch as %v", errs)
	}
	if got := f.rc.Conflicts(); got != 4 {
		t.Fatalf("Conflicts() = %d, want 4", got)
	}
	if n := f.count("SELECT count(*) FROM {s}.effects WHERE key LIKE 'dup-%'"); n != 0 {
		t.Fatalf("%d conflicting messages applied", n)
	}
	if logs := f.logs.String(); !strings.Contains(logs, "conflicting message refused") || !strings.Contains(logs, first.String()) {
		t.Errorf("the conflict was not logged with the first message:\n%s", logs)
	}
}

// Keys that differ on the wire only in an unpaired surrogate escape used
// to decode to the same U+FFFD and be deduplicated as one message. They
// are refused with 400 before anything is applied, alone or in a batch,
// and the other envelopes of the batch are applied.
func TestReceiverRefusesUnpairedSurrogates(t *testing.T) {
	f := newReceiverFixture(t, 0, nil)
	good := envelopeFor("order-1", time.Now(), `{}`)
	high := strings.Replace(good, `"key":"order-1"`, `"key":"order-\ud800"`, 1)
	low := strings.Replace(good, `"key":"order-1"`, `"key":"order-\udc00"`, 1)
	for _, body := range []string{high, low} {
		a := post(t, f.url, auth, body)
		if a.status != http.StatusBadRequest || a.problem.Type != ProblemMalformed || !strings.Contains(a.problem.Detail, "surrogate") {
			t.Fatalf("%s answered %d %s", body, a.status, a.body)
		}
	}
	if n := f.count("SELECT count(*) FROM {s}.inbox") + f.count("SELECT count(*) FROM {s}.effects"); n != 0 || f.applied.Load() != 0 {
		t.Fatalf("refused envelopes stored %d rows", n)
	}

	e1, _ := envelopeOf("order.closed", "k-a", time.Now())
	e2, _ := envelopeOf("order.closed", "k-b", time.Now())
	e1 = strings.Replace(e1, `"key":"k-a"`, `"key":"k-\ud83d"`, 1)
	pair, _ := envelopeOf("order.closed", "k-c", time.Now())
	pair = strings.Replace(pair, `"key":"k-c"`, `"key":"k-\ud83d\ude00"`, 1)
	rs := batchResults(t, post(t, f.url, batchHeader, batchOf(e1, e2, pair)))
	if rs[0].Status != ItemRefused || rs[0].Problem == nil || rs[0].Problem.Status != http.StatusBadRequest || rs[0].Problem.Type != ProblemMalformed {
		t.Fatalf("the unpaired surrogate in a batch: %+v", rs[0])
	}
	if rs[1].Status != ItemApplied || rs[2].Status != ItemApplied {
		t.Fatalf("the others: %+v %+v", rs[1], rs[2])
	}
	if n := f.count("SELECT count(*) FROM {s}.effects WHERE key = 'k-\U0001F600'"); n != 1 {
		t.Fatalf("the surrogate pair's key applied %d times, want once as its character", n)
	}
}
