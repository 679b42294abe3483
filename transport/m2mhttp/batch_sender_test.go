package m2mhttp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xadm/mensageria"
)

func TestBatchSenderIsABatchSender(t *testing.T) {
	s, err := NewSender(SenderConfig{URL: "http://127.0.0.1:1/x", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mensageria.Sender(s).(mensageria.BatchSender); ok {
		t.Fatal("a Sender from NewSender must not be a BatchSender: the relay would batch it")
	}
	b, err := NewBatchSender(SenderConfig{URL: "http://127.0.0.1:1/x", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := mensageria.Sender(b).(mensageria.BatchSender); !ok {
		t.Fatal("NewBatchSender's Sender is not a BatchSender")
	}
	for _, c := range []SenderConfig{
		{URL: "http://127.0.0.1:1/x", Token: "t", MaxBatchItems: -1},
		{URL: "http://127.0.0.1:1/x", Token: "t", MaxBatchBytes: -1},
		{URL: "ftp://x", Token: "t"},
	} {
		if _, err := NewBatchSender(c); !errors.Is(err, mensageria.ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// TestBatchSenderItemResults: each result maps to the outcome the same
// answer to a single request has.
func TestBatchSenderItemResults(t *testing.T) {
	var got http.Header
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		items, err := DecodeBatch(mustRead(r), 100)
		if err != nil {
			t.Errorf("sender's batch: %v", err)
		}
		rs := make([]BatchResult, len(items))
		for i, it := range items {
			rs[i].ID = it.ID
			switch it.Envelope.Key {
			case "applied", "duplicate", "retry", "refused", "stale", "bogus":
				rs[i].Status = it.Envelope.Key
			case "later":
				rs[i].Status, rs[i].RetryAfter = ItemRetry, 7
			case "wrong-id":
				rs[i].Status, rs[i].ID = ItemApplied, "0190f0c2-6c3d-7b3e-9a51-2f4c1d7e8a90"
			}
			if rs[i].Status != ItemApplied && rs[i].Status != ItemDuplicate {
				rs[i].Problem = &Problem{Type: ProblemRefused, Title: "T", Status: map[string]int{ItemRefused: 400, ItemStale: 409}[rs[i].Status], Detail: "why " + it.Envelope.Key}
			}
		}
		w.Header().Set("Content-Type", ContentTypeBatch)
		_ = json.NewEncoder(w).Encode(batchAnswer{Results: rs})
	}))
	defer srv.Close()
	s, err := NewBatchSender(SenderConfig{URL: srv.URL, Token: "tok-1"})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"applied", "duplicate", "retry", "later", "refused", "stale", "bogus", "wrong-id"}
	ds := make([]*mensageria.Delivery, len(keys))
	for i, k := range keys {
		ds[i] = testDelivery()
		ds[i].Key = k
	}
	ds = append(ds, testDelivery())
	ds[len(ds)-1].Payload = json.RawMessage(`{nope`) // cannot be encoded
	errs := s.SendBatch(context.Background(), ds)
	if len(errs) != len(ds) {
		t.Fatalf("%d errors for %d deliveries", len(errs), len(ds))
	}
	check := func(i int, wantNil, perm bool, ra time.Duration, reason string) {
		t.Helper()
		err := errs[i]
		if wantNil {
			if err != nil {
				t.Errorf("%s: %v", ds[i].Key, err)
			}
			return
		}
		d, hasRA := mensageria.RetryAfterOf(err)
		if err == nil || mensageria.IsPermanent(err) != perm || (ra > 0) != hasRA || d != ra || !strings.Contains(err.Error(), reason) {
			t.Errorf("%s: %v (permanent %v, retry after %v); want permanent %v, retry after %v, %q", ds[i].Key, err, mensageria.IsPermanent(err), d, perm, ra, reason)
		}
		// The receiver answered for this envelope: whatever it said is
		// the message's outcome, never the route's.
		if mensageria.IsUnavailable(err) {
			t.Errorf("%s: %v is marked Unavailable; an item's answer is about the message", ds[i].Key, err)
		}
	}
	check(0, true, false, 0, "")
	check(1, true, false, 0, "")
	check(2, false, false, 0, "http 503")
	check(3, false, false, 7*time.Second, "why later")
	check(4, false, true, 0, "http 400 Bad Request: T: why refused")
	check(5, false, true, 0, "http 409")
	check(6, false, false, 0, "unknown status")
	check(7, false, false, 0, "in the place of")
	check(8, false, true, 0, "encode envelope")
	mu.Lock()
	defer mu.Unlock()
	if got.Get("Content-Type") != ContentTypeBatch || got.Get("Authorization") != "Bearer tok-1" || got.Get("X-Request-Id") == "" || got.Get("Idempotency-Key") != "" {
		t.Errorf("batch request headers: %v", got)
	}
}

func mustRead(r *http.Request) []byte {
	b, _ := io.ReadAll(r.Body)
	return b
}

// TestBatchSenderWholeRequest: an answer to the request as a whole is
// every envelope's answer; 415 falls back to single requests; the
// limits split a batch into several requests.
func TestBatchSenderWholeRequest(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	singles := 0
	status := 200
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.Header.Get("Content-Type") == contentTypeJSON {
			singles++
			w.Header().Set("Content-Type", contentTypeJSON)
			_, _ = w.Write(bodyApplied)
			return
		}
		items, _ := DecodeBatch(mustRead(r), 1000)
		sizes = append(sizes, len(items))
		switch status {
		case 200:
			rs := make([]BatchResult, len(items))
			for i := range rs {
				rs[i] = BatchResult{ID: items[i].ID, Status: ItemApplied}
			}
			w.Header().Set("Content-Type", ContentTypeBatch)
			_ = json.NewEncoder(w).Encode(batchAnswer{Results: rs})
		case 299: // a 2xx that is no batch answer
			w.Header().Set("Content-Type", contentTypeJSON)
			_, _ = w.Write(bodyApplied)
		case 298: // too few results
			w.Header().Set("Content-Type", ContentTypeBatch)
			_, _ = w.Write([]byte(`{"results":[]}`))
		case 302:
			w.Header().Set("Location", "http://127.0.0.1:1/")
			w.WriteHeader(302)
		default:
			writeProblem(w, Problem{Type: ProblemInternal, Title: "Nope", Status: status, Detail: "whole"}, 3*time.Second)
		}
	}))
	defer srv.Close()
	s, err := NewBatchSender(SenderConfig{URL: srv.URL, Token: "tok-1", MaxBatchItems: 4, MaxBatchBytes: 2000})
	if err != nil {
		t.Fatal(err)
	}
	batch := func(n int) []*mensageria.Delivery {
		ds := make([]*mensageria.Delivery, n)
		for i := range ds {
			ds[i] = testDelivery()
		}
		return ds
	}
	for _, c := range []struct {
		status    int
		perm      bool
		ra        time.Duration
		reason    string
		delivered bool
	}{
		{200, false, 0, "", true},
		{299, false, 0, "not " + ContentTypeBatch, false},
		{298, false, 0, "malformed batch answer", false},
		{302, true, 0, "redirect not followed", false},
		{401, false, 3 * time.Second, "whole", false},
		{413, true, 0, "whole", false},
		{429, false, 3 * time.Second, "whole", false},
		{503, false, 3 * time.Second, "whole", false},
		{500, false, 3 * time.Second, "whole", false},
		{415, false, 0, "", true},
	} {
		mu.Lock()
		status, sizes, singles = c.status, nil, 0
		mu.Unlock()
		ds := batch(10)
		errs := s.SendBatch(context.Background(), ds)
		for i, err := range errs {
			if c.delivered {
				if err != nil {
					t.Errorf("%d: item %d: %v", c.status, i, err)
				}
				continue
			}
			d, _ := mensageria.RetryAfterOf(err)
			if err == nil || mensageria.IsPermanent(err) != c.perm || d != c.ra || !strings.Contains(err.Error(), c.reason) {
				t.Errorf("%d: item %d: %v; want permanent %v, retry after %v, %q", c.status, i, err, c.perm, c.ra, c.reason)
			}
			// The whole request's answer is about the destination for
			// 401, 429 and 5xx; a 3xx or 413 is about what was sent.
			if want := DestinationStatus(c.status); err != nil && mensageria.IsUnavailable(err) != want {
				t.Errorf("%d: item %d: Unavailable = %v, want %v", c.status, i, mensageria.IsUnavailable(err), want)
			}
		}
		mu.Lock()
		if len(sizes) != 3 || sizes[0]+sizes[1]+sizes[2] != 10 || max(sizes[0], sizes[1], sizes[2]) > 4 {
			t.Errorf("%d: 10 messages split into %v, want 3 requests of at most 4", c.status, sizes)
		}
		if want := map[bool]int{true: 10, false: 0}[c.status == 415]; singles != want {
			t.Errorf("%d: %d single requests, want %d", c.status, singles, want)
		}
		mu.Unlock()
	}

	// The byte limit splits too; an envelope over it travels alone.
	mu.Lock()
	status, sizes = 200, nil
	mu.Unlock()
	ds := batch(3)
	ds[1].Payload = json.RawMessage(`"` + strings.Repeat("x", 3000) + `"`)
	if errs := s.SendBatch(context.Background(), ds); errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("%v", errs)
	}
	mu.Lock()
	if len(sizes) != 3 {
		t.Errorf("byte limit: sizes %v, want 3 requests", sizes)
	}
	mu.Unlock()

	// A dead receiver: the network error is every envelope's.
	srv.Close()
	for _, err := range s.SendBatch(context.Background(), batch(2)) {
		if err == nil || mensageria.IsPermanent(err) || !mensageria.IsUnavailable(err) {
			t.Errorf("network error: %v, want one about the destination", err)
		}
	}
}
