package m2mhttp

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/driver"
)

// TestQueueHandlerStoresOnceWithItsRecord: a delivery through QueueHandler
// is one pending row of the inbox queue, stored with its dedup record: a
// redelivery stores nothing, the same key with another payload is refused
// as a conflict and stores nothing, a batch stores its new envelopes in one
// go; OnOutcome hears each outcome after its transaction.
func TestQueueHandlerStoresOnceWithItsRecord(t *testing.T) {
	drv, pool, schema := pg(t)
	inbox, err := mensageria.NewInbox(drv, mensageria.InboxConfig{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := QueueHandler(inbox)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var outcomes []string
	rc, err := NewReceiver(ReceiverConfig{
		Tokens:   []string{"new-token"},
		Handlers: map[string]Handler{"order.closed": h},
		OnOutcome: func(typ, outcome string) {
			mu.Lock()
			defer mu.Unlock()
			outcomes = append(outcomes, typ+" "+outcome)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(conforms(t, rc))
	t.Cleanup(srv.Close)
	url := srv.URL + "/m2m"
	rows := func() int { return count(t, pool, "SELECT count(*) FROM "+schema+".inbox_queue") }

	created := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	id := uuid.Must(uuid.NewV7())
	body, _ := EncodeEnvelope(&mensageria.Delivery{ID: id, Type: "order.closed", Key: "order-7", Payload: json.RawMessage(`{"total": 10}`),
		Headers: map[string]string{"traceparent": "00-t"}, CreatedAt: created, Attempt: 1})
	if a := post(t, url, auth, string(body)); a.status != 200 || string(a.body) != `{"status":"applied"}` {
		t.Fatalf("first: %d %s", a.status, a.body)
	}
	if a := post(t, url, auth, string(body)); string(a.body) != `{"status":"duplicate"}` || rows() != 1 {
		t.Fatalf("redelivery: %d %s, %d rows", a.status, a.body, rows())
	}
	if a := post(t, url, auth, envelopeFor("order-7", time.Now(), `{"total": 11}`)); a.status != 409 || a.problem.Type != ProblemConflict || rows() != 1 {
		t.Fatalf("conflict: %d %s, %d rows", a.status, a.body, rows())
	}
	var (
		gotID                             uuid.UUID
		typ, key, payload, headers, state string
		gotCreated                        time.Time
	)
	if err := pool.QueryRow(context.Background(), "SELECT message_id, type, key, payload::text, headers::text, state, created_at FROM "+schema+".inbox_queue").
		Scan(&gotID, &typ, &key, &payload, &headers, &state, &gotCreated); err != nil {
		t.Fatal(err)
	}
	if gotID != id || typ != "order.closed" || key != "order-7" || payload != `{"total":10}` || headers != `{"traceparent":"00-t"}` || state != driver.InboxPending || !gotCreated.Equal(created) {
		t.Fatalf("stored %s %s %s %s %s %s %s", gotID, typ, key, payload, headers, state, gotCreated)
	}

	e1, _ := envelopeOf("order.closed", "b-1", time.Now())
	e2, _ := envelopeOf("order.closed", "b-2", time.Now())
	rs := batchResults(t, post(t, url, batchHeader, batchOf(e1, e2, string(body))))
	if rs[0].Status != ItemApplied || rs[1].Status != ItemApplied || rs[2].Status != ItemDuplicate || rows() != 3 {
		t.Fatalf("batch: %+v, %d rows", rs, rows())
	}
	want := []string{"order.closed applied", "order.closed duplicate", "order.closed conflict", "order.closed applied", "order.closed applied", "order.closed duplicate"}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(outcomes, want) {
		t.Fatalf("outcomes %v, want %v", outcomes, want)
	}
}

// TestReceiverSetTokens: a new set of tokens takes effect at once, without
// a new Receiver; a bad set is refused and the tokens in force stay.
func TestReceiverSetTokens(t *testing.T) {
	f := newReceiverFixture(t, 0, nil)
	as := func(tok string) int {
		return post(t, f.url, map[string]string{"Authorization": "Bearer " + tok}, envelopeFor("k-"+tok, time.Now(), `{}`)).status
	}
	if as("old-token") != 200 || as("new-token") != 200 || f.rc.Tokens() != 2 {
		t.Fatal("the configured tokens are not accepted")
	}
	if err := f.rc.SetTokens([]string{"newest"}); err != nil {
		t.Fatal(err)
	}
	if as("old-token") != 401 || as("newest") != 200 || f.rc.Tokens() != 1 {
		t.Fatal("SetTokens did not replace the set")
	}
	for _, bad := range [][]string{nil, {""}, {"ok", "bad\ntoken"}} {
		if err := f.rc.SetTokens(bad); err == nil {
			t.Errorf("SetTokens(%q) accepted", bad)
		}
	}
	if as("newest") != 200 || f.rc.Tokens() != 1 {
		t.Fatal("a refused set changed the tokens in force")
	}
	if _, err := QueueHandler(nil); err == nil {
		t.Fatal("QueueHandler(nil) accepted")
	}
}
